<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support\App;

use Illuminate\Auth\GenericUser;
use Illuminate\Http\Request;
use Illuminate\Support\Facades\Auth;
use Illuminate\Support\ServiceProvider;

/**
 * The test app's guards. `web`, the default as in laravel/laravel, finds no
 * user on an API request (it has no session). `api` signs in the user whose
 * name is the bearer token (`Authorization: Bearer alice`), as a token guard
 * would. The `memory` user provider holds the login routes' users.
 */
class AuthServiceProvider extends ServiceProvider
{
    public function boot(): void
    {
        Auth::viaRequest('no-session', fn () => null);
        Auth::viaRequest('bearer-name', function (Request $request) {
            $name = $request->bearerToken();
            return $name === null ? null : new GenericUser(['id' => $name]);
        });
        Auth::provider('memory', fn ($app, array $config) => new MemoryUserProvider($config['users'] ?? []));
    }
}
