// After tsc: each output format's package.json (its module type), and the loader of the
// addon for each (ESM loads a .node file through createRequire, CommonJS with require).
const fs = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const addon = `
const platform = process.platform === 'linux' ? 'linux-' + process.arch + '-gnu' : process.platform + '-' + process.arch;
const file = '../../redis-rl.' + platform + '.node';
let native;
try {
  native = require(file);
} catch (e) {
  throw new Error('redis-rl: no addon for ' + platform + ' (' + file + '): ' + e.message +
    '; the package ships a prebuilt addon for Linux x86_64 (glibc); elsewhere build it from the repository (npm run build)');
}
`;
const formats = {
  esm: {
    type: 'module',
    js: `import { createRequire } from 'node:module';\nconst require = createRequire(import.meta.url);\n${addon}export default native;\n`,
  },
  cjs: {
    type: 'commonjs',
    js: `'use strict';\nObject.defineProperty(exports, '__esModule', { value: true });\n${addon}exports.default = native;\n`,
  },
};
const dts = fs
  .readFileSync(path.join(root, 'ts', 'load.d.ts'), 'utf8')
  .replaceAll("'../native.js'", "'../../native.js'");
for (const [dir, f] of Object.entries(formats)) {
  const out = path.join(root, 'dist', dir);
  fs.writeFileSync(path.join(out, 'package.json'), JSON.stringify({ type: f.type }) + '\n');
  fs.writeFileSync(path.join(out, 'load.js'), f.js);
  fs.writeFileSync(path.join(out, 'load.d.ts'), dts);
}
