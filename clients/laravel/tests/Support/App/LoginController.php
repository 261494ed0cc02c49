<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support\App;

use Illuminate\Auth\Events\Lockout;
use Illuminate\Cache\RateLimiter;
use Illuminate\Http\JsonResponse;
use Illuminate\Http\Request;
use Illuminate\Routing\Controller;
use Illuminate\Support\Facades\Auth;
use Illuminate\Support\Str;
use RedisThrottle\Laravel\LoginThrottle;

/**
 * A login route as laravel/ui's AuthenticatesUsers and ThrottlesLogins run
 * one: look before the attempt (tooManyAttempts with the controller's
 * maxAttempts), a lockout answers 429 with availableIn's seconds and fires
 * Laravel's Lockout event, a success clears the key, a failure is a hit
 * with the controller's decay. The key is the e-mail address and the IP.
 * limiter() is the one line that differs from Laravel's: the package's
 * LoginThrottle, given the controller's numbers and a lockout, instead of
 * Laravel's RateLimiter (the route's `limiter` default `laravel` keeps
 * Laravel's, for side-by-side tests).
 */
class LoginController extends Controller
{
    /** ThrottlesLogins' settings: failures in a window of decayMinutes. */
    protected int $maxAttempts = 5;
    protected int $decayMinutes = 15;

    /** The package's addition: the maxAttempts-th failure locks the key out for this long; null: Laravel's lockout. */
    protected ?int $lockoutMinutes = 15;

    /**
     * The route's defaults pick the variant: `limiter` (native or laravel),
     * `lockout` (minutes, or none) and `decay` (minutes).
     */
    public function login(Request $request): JsonResponse
    {
        $route = $request->route();
        $lockout = (string) $route->parameter('lockout', '15');
        $this->lockoutMinutes = $lockout === 'none' ? null : (int) $lockout;
        $this->decayMinutes = (int) $route->parameter('decay', '15');
        $throttle = $route->parameter('limiter') === 'laravel' ? app(RateLimiter::class) : $this->limiter();
        $key = $this->throttleKey($request);

        if ($throttle->tooManyAttempts($key, $this->maxAttempts)) {
            event(new Lockout($request));
            $seconds = $throttle->availableIn($key);
            return new JsonResponse(
                ['message' => "Too many login attempts. Please try again in $seconds seconds."],
                429,
                ['Retry-After' => $seconds],
            );
        }

        $users = Auth::createUserProvider('users');
        $user = $users->retrieveByCredentials($request->only('email'));
        if ($user !== null && $users->validateCredentials($user, $request->only('password'))) {
            $throttle->clear($key);
            return new JsonResponse(['user' => $user->getAuthIdentifier()]);
        }

        $throttle->hit($key, $this->decayMinutes * 60);
        return new JsonResponse(['message' => 'These credentials do not match our records.'], 422);
    }

    protected function limiter(): LoginThrottle
    {
        return new LoginThrottle(
            $this->maxAttempts,
            $this->decayMinutes * 60,
            $this->lockoutMinutes === null ? null : $this->lockoutMinutes * 60,
        );
    }

    protected function throttleKey(Request $request): string
    {
        return Str::lower((string) $request->input('email')) . '|' . $request->ip();
    }
}
