// Runs before `npm install`, `npm start` and `npm test` on whatever `node` is on PATH, so it is written in syntax any
// Node.js parses. An older Node.js than package.json's `engines` asks for otherwise fails further on with a message
// that does not say why (`node: bad option: --scavenger-max-new-space-capacity-mb=8`).
'use strict';

var required = Number(/\d+/.exec(require('../package.json').engines.node)[0]);
var found = Number(process.versions.node.split('.')[0]);
if (found < required) {
  console.error(
    'This project needs Node.js ' +
      required +
      ' or later, and the node on your PATH is ' +
      process.version +
      ' (' +
      process.execPath +
      '). Install Node.js ' +
      required +
      ' (for example `nvm install ' +
      required +
      '`) and run the command again.',
  );
  process.exit(1);
}
