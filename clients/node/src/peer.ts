// Loads a package the application installs beside this one (a peer, such
// as rate-limiter-flexible), resolved from this package's own place, only
// when a class that needs it is first used. The CommonJS build replaces
// this file with one that uses CommonJS's own `require` (build.js).
import { createRequire } from 'node:module';

// @ts-ignore -- import.meta exists in the ESM build this file is for
const here: string = import.meta.url;

/** `require`, resolving from this package. */
export const requirePeer: (id: string) => unknown = createRequire(here);
