<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support\App;

use Illuminate\Cache\RateLimiting\Limit;
use Illuminate\Foundation\Support\Providers\RouteServiceProvider as ServiceProvider;
use Illuminate\Http\Request;
use Illuminate\Support\Facades\RateLimiter;
use Illuminate\Support\Facades\Route;

/**
 * laravel/laravel 8.x's App\Providers\RouteServiceProvider and
 * routes/api.php (tag v8.6.12): the `api` limiter keyed by the user's id,
 * else the IP, and `/api/user` behind `auth:...`. Changed: 2 a minute
 * instead of 60, the `api` guard instead of Sanctum's, and the route answers
 * the user's id. Added: the login routes of LoginController.
 */
class RouteServiceProvider extends ServiceProvider
{
    public function boot()
    {
        $this->configureRateLimiting();

        $this->routes(function () {
            Route::prefix('api')
                ->middleware('api')
                ->group(function () {
                    Route::middleware('auth:api')->get('/user', function (Request $request) {
                        return $request->user()->id;
                    });
                });

            // Logins (LoginController): locked out for 15 minutes after 5
            // failures in 15 minutes; ThrottlesLogins' defaults (5 in a
            // minute) on the package and on Laravel's RateLimiter.
            Route::post('/login', [LoginController::class, 'login']);
            Route::post('/login/no-lockout', [LoginController::class, 'login'])->defaults('lockout', 'none')->defaults('decay', '1');
            Route::post('/login/laravel', [LoginController::class, 'login'])->defaults('limiter', 'laravel')->defaults('decay', '1');
        });
    }

    protected function configureRateLimiting()
    {
        RateLimiter::for('api', function (Request $request) {
            return Limit::perMinute(2)->by(optional($request->user())->id ?: $request->ip());
        });
    }
}
