<?php

declare(strict_types=1);

namespace RedisThrottle\Laravel\Tests\Support\App;

use Illuminate\Auth\GenericUser;
use Illuminate\Contracts\Auth\Authenticatable;
use Illuminate\Contracts\Auth\UserProvider;

/**
 * The test app's users (`auth.providers.users`, driver `memory`): e-mail
 * address => bcrypt hash of the password, checked as Laravel's database
 * provider checks them (password_verify), without a database.
 */
class MemoryUserProvider implements UserProvider
{
    /** @param array<string, string> $users */
    public function __construct(private array $users)
    {
    }

    public function retrieveById($identifier)
    {
        return isset($this->users[$identifier]) ? new GenericUser(['id' => $identifier, 'password' => $this->users[$identifier]]) : null;
    }

    public function retrieveByToken($identifier, $token)
    {
        return null;
    }

    public function updateRememberToken(Authenticatable $user, $token)
    {
    }

    public function retrieveByCredentials(array $credentials)
    {
        return $this->retrieveById((string) ($credentials['email'] ?? ''));
    }

    public function validateCredentials(Authenticatable $user, array $credentials)
    {
        return password_verify((string) ($credentials['password'] ?? ''), $user->getAuthPassword());
    }

    /** Laravel 11's addition to the contract. */
    public function rehashPasswordIfRequired(Authenticatable $user, array $credentials, bool $force = false)
    {
    }
}
