// Real HTTP against the frameworks: each app listens on a free loopback port
// and is asked with fetch.
import http from 'node:http';

/** Serves `handler` (an express app or any request listener) on 127.0.0.1; resolves to { url, close }. */
export async function listen(handler) {
  const server = http.createServer(handler);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

/** One request: { status, headers (lower-case names), body }. */
export async function request(url, headers = {}) {
  const res = await fetch(url, { headers });
  return { status: res.status, headers: Object.fromEntries(res.headers), body: await res.text() };
}

/** Fires `count` requests at once; resolves to how many got each status. */
export async function flood(url, count, headers = {}) {
  const statuses = await Promise.all(Array.from({ length: count }, () => fetch(url, { headers }).then(async (r) => (await r.arrayBuffer(), r.status))));
  const counts = {};
  for (const status of statuses) counts[status] = (counts[status] ?? 0) + 1;
  return counts;
}

/** Polls `probe` until it returns something truthy, or fails after `ms`. */
export async function eventually(probe, ms = 5000, what = 'the condition') {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what} did not hold within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
