/**
 * The local engine run in the calling thread, and the person models it loads: for benches, scripts and tests. The
 * service runs the local engine only in its engine threads (`ThreadedLocalEngine`), so a service process's main
 * thread, which imports `index.ts`, never loads TensorFlow.js (about 20 MB of every API and worker process).
 */
export { LocalEngine } from './local/local.engine.js';
export { analysePerson, personModels } from './local/person-model.js';
