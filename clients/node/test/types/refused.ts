// Wrong arguments that must not compile: test/types.test.js compiles this
// file and expects an error on every line marked `// refused`, and nowhere else.
import { createSentinel } from 'redis';
import { createClient } from 'redis';
import { Throttle, ExpressStore, createFastifyStore, NestStorage, Semaphore } from 'redis-throttle';

declare const sentinel: ReturnType<typeof createSentinel>;
const redis = createClient();
const throttle = new Throttle(redis);

new Throttle({}); // refused
new Throttle('redis://127.0.0.1:6379'); // refused
new Throttle(sentinel); // refused
new Throttle(redis, { keyPrefix: 'x:' }); // refused
new ExpressStore({ client: {} }); // refused
new ExpressStore({ sendCommand: (...args: string[]) => redis.sendCommand(args), resetExpiryOnChange: true }); // refused
createFastifyStore({}); // refused
createFastifyStore(redis, { nameSpace: 'x:' }); // refused
new NestStorage({}); // refused
throttle.fixed('k', 1, '1s', { burst: 2 }); // refused
throttle.token('k', 1, '1s', { exact: true }); // refused
throttle.all([{ algorithm: 'fixed', key: 'k', limit: 1, period: '1s' }], { block: 10 }); // refused
throttle.info('k', { cost: 0 }); // refused
throttle.acquire('k', 1, '1s', { cost: 1 }); // refused
throttle.release('k', 'token', { block: 10 }); // refused
new Semaphore(redis, 'k', 1, { prefix: 'x:' }); // refused
new Semaphore({}, 'k', 1); // refused
void (async () => { const r = await throttle.acquire('k', 1, '1s'); await r.release(); })(); // refused
