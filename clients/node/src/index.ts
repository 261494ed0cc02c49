export { Throttle, type ThrottleOptions } from './throttle.js';
export {
  ThrottleModuleMissingError,
  type Algorithm,
  type CallOptions,
  type LimitSpec,
  type Period,
  type IoredisLike,
  type NodeRedisClientLike,
  type NodeRedisClusterLike,
  type RedisClientLike,
  type Send,
} from './command.js';
export type { ThrottleAllResult, ThrottleInfo, ThrottleResult } from './reply.js';
export { ExpressStore, type ClientRateLimitInfo, type ExpressStoreOptions, type SendCommandClusterFn, type SendCommandFn } from './express.js';
export { createFastifyStore, type FastifyStore, type FastifyStoreClass, type FastifyStoreOptions } from './fastify.js';
export { NestStorage, type NestStorageOptions, type ThrottlerStorageRecord } from './nest.js';
export type { AllOptions, PenaltyOptions } from './command.js';
export { RateLimiterThrottle, type RateLimiterResLike, type RateLimiterThrottleOptions } from './rate-limiter-flexible.js';
export {
  Lease,
  LeaseNotAcquiredError,
  type AcquireOptions,
  type AcquireResult,
  type LeaseRefused,
} from './lease.js';
export {
  Semaphore,
  LostLockError,
  TimeoutError,
  defaultTimeoutOptions,
  type LockLostCallback,
  type LockOptions,
  type TimeoutOptions,
} from './semaphore.js';
