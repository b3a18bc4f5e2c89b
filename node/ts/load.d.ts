// The addon (redis-rl.<platform>.node), typed by the declarations napi-rs generates from the
// Rust sources. The JavaScript of this module is written per output format by
// scripts/finish-build.cjs (ESM needs createRequire to load a .node file, CommonJS not).
import type * as Native from '../native.js';
export type * from '../native.js';
declare const native: typeof Native;
export default native;
