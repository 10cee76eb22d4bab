/**
 * The layers of src/, checked by `npm run lint:deps` (part of `npm test`):
 *
 *   main.ts, tracing.ts, service.ts, app.module.ts, cli.ts   compose everything
 *   admin: the operators' tools (the queue board, a user's removal), on everything below
 *   features: auth, catalog's routes, generation, history, worker, webhooks, health, contract, the /media route
 *   jobs: history items as jobs (repository, lifecycle, events), shared by the features that create, show and run them
 *   users: the operators' statements on users and their own limits, which job creation reads
 *   files: users' stored files (rows and bytes), which job creation, the files' routes and a user's removal use
 *   engines: what runs a job's model (the port, the registry, one folder per kind), on common/ and the configuration only
 *   infrastructure: config, common, database, redis, queue, media storage, metrics, generated contract types
 *
 * Imports go down, never up; features do not import one another (auth's decorators and the catalog's data are for
 * everyone); no cycles.
 */
const INFRASTRUCTURE =
  '^src/(config|common|database|redis|queue|metrics|generated)/|^src/media/(?!media(\\.controller|-api\\.module))';
const ABOVE_INFRASTRUCTURE =
  '^src/(admin|auth|catalog|generation|history|jobs|users|files|worker|webhooks|health|contract)/|^src/media/media(\\.controller|-api\\.module)';
const FEATURES = '^src/(admin|generation|history|worker|webhooks|health|contract)/';
/** What every layer may use: the catalog's data (it drives configuration too), and who the request's user is. */
const SHARED = '^src/catalog/catalog\\.ts$|^src/auth/(auth\\.decorators|user\\.entity)\\.ts$';

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      comment: 'A cycle makes the order modules boot in, and what a change touches, a guess.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'infrastructure-below-features',
      comment: 'Infrastructure serves features and knows none of them.',
      severity: 'error',
      from: { path: INFRASTRUCTURE },
      to: { path: ABOVE_INFRASTRUCTURE, pathNot: '^src/catalog/catalog\\.ts$' },
    },
    {
      name: 'jobs-below-features',
      comment: 'The job lifecycle is used by generation, history and the worker; it uses none of them.',
      severity: 'error',
      from: { path: '^src/jobs/' },
      to: { path: FEATURES },
    },
    {
      name: 'users-below-features',
      comment: "Users' statements serve job creation and the operators' tools; they use neither.",
      severity: 'error',
      from: { path: '^src/users/' },
      to: { path: '^src/(admin|auth|generation|history|jobs|worker|webhooks|health|contract)/', pathNot: SHARED },
    },
    {
      name: 'files-below-features',
      comment: "Stored files serve job creation, the files' routes and the operators' tools; they use none of them.",
      severity: 'error',
      from: { path: '^src/files/' },
      to: { path: '^src/(admin|auth|generation|history|jobs|users|worker|webhooks|health|contract)/', pathNot: SHARED },
    },
    {
      name: 'features-apart',
      comment: 'A feature reaches another only through the layers below both.',
      severity: 'error',
      from: { path: '^src/(auth|catalog|generation|history|worker|webhooks|health|contract)/' },
      to: {
        path: '^src/(auth|catalog|generation|history|worker|webhooks|health|contract)/',
        pathNot: ['^src/$1/', SHARED],
      },
    },
    {
      name: 'engines-on-common-and-config',
      comment: 'An engine knows the port, the shared helpers and its settings; nothing of jobs, queues or features.',
      severity: 'error',
      from: { path: '^src/engines/', pathNot: '\\.spec\\.ts$' },
      to: { path: '^src/', pathNot: '^src/(engines|common|config)/|^src/catalog/catalog\\.ts$' },
    },
    {
      name: 'engine-internals-private',
      comment:
        "Outside src/engines/, engines are reached through their entry points (src/engines/index.ts, in-process.ts, and engine-kinds.ts: the kinds' checks of their servers and routes, for the routing file's reader in config).",
      severity: 'error',
      from: { pathNot: '^(src|dist)/engines/' },
      to: { path: '^(src|dist)/engines/', pathNot: '^(src|dist)/engines/(index|in-process|engine-kinds)\\.[jt]s$' },
    },
    {
      name: 'engine-kinds-for-config-only',
      comment:
        "The routing file's reader (config, infrastructure) runs the kinds' checks: they import only config's types and each other, never an engine's run-time code.",
      severity: 'error',
      from: { path: '^src/engines/(engine-kinds|model-routes|[^/]+/[^/]+\\.settings)\\.ts$' },
      to: {
        path: '^src/',
        pathNot:
          '^src/config/(engines-file|engine-settings)\\.ts$|^src/engines/(model-routes|[^/]+/[^/]+\\.settings)\\.ts$',
      },
    },
    {
      name: 'local-engine-in-threads-only',
      comment:
        "The service runs the local engine in engine threads only: its processes' main threads never load TensorFlow.js.",
      severity: 'error',
      from: { path: '^src/', pathNot: '^src/engines/|\\.spec\\.ts$' },
      to: { path: '^src/engines/in-process\\.ts$' },
    },
    {
      name: 'src-not-to-test',
      comment: "The service never reaches into the tests; a unit spec may use the tests' shared helpers.",
      severity: 'error',
      from: { path: '^src/', pathNot: '\\.spec\\.ts$' },
      to: { path: '^(test|scripts)/' },
    },
    {
      name: 'no-dev-dependencies-at-run-time',
      comment: 'What the service imports must be installed in production (npm install --omit=dev).',
      severity: 'error',
      from: { path: '^src/', pathNot: '\\.spec\\.ts$' },
      to: { dependencyTypes: ['npm-dev'] },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: { exportsFields: ['exports'], conditionNames: ['import', 'require', 'node', 'default'] },
  },
};
