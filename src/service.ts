import 'reflect-metadata';
import { fileURLToPath } from 'node:url';
import { ShutdownSignal } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { Request } from 'express';
import { type OpenAPIObject, SwaggerModule } from '@nestjs/swagger';
import { mountQueueBoard } from './admin/queue-board.js';
import { AppModule } from './app.module.js';
import { Draining } from './common/draining.js';
import { PrototypedExpressAdapter } from './common/express-adapter.js';
import { createRootLogger, JsonLogger, requestLogging } from './common/logging.js';
import { DOCS_ROUTE, PLAYGROUND_ROUTE, hardenHttp } from './common/security.js';
import { type AppConfig, assertServingSettings, ConfigError, loadConfig } from './config/config.js';
import { Contract, servedServer } from './contract/contract.js';
import { waitForDatabase } from './database/data-source.js';
import { httpMetrics } from './metrics/http-metrics.js';
import { Metrics } from './metrics/metrics.js';
import { assertRedisReachable } from './redis/redis.js';

async function bootstrap(config: AppConfig): Promise<void> {
  await assertRedisReachable(config.redisUrl);
  const logger = new JsonLogger(createRootLogger(config));
  if (config.databaseUrl) await waitForDatabase(config.databaseUrl, logger);
  // Nest's default parsers would parse JSON and forms on every route; the one JSON body is feedback's (HistoryModule).
  const app = await NestFactory.create<NestExpressApplication>(
    AppModule.forRole(config),
    new PrototypedExpressAdapter(),
    {
      logger,
      bodyParser: false,
    },
  );
  app.disable('x-powered-by');
  // The contract has no conditional requests (no 304), and hashing every answer for an ETag costs each one.
  app.set('etag', false);
  app.use(requestLogging(logger.pino));
  app.use(httpMetrics(app.get(Metrics)));
  hardenHttp(app, config);
  // process.exit(0) after the shutdown hooks, instead of re-raising the signal: SIGTERM ends with exit code 0.
  // Before Nest's own shutdown hooks run (Bull's closes the queues and waits for their running jobs): from the signal
  // on, nothing held open waits any longer and no job still waiting for its engine's slot starts.
  const draining = app.get(Draining);
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => draining.begin());
  // Every signal Nest knows but SIGHUP, which reads the routing file again (LiveRouting) and must not stop the process.
  app.enableShutdownHooks(
    Object.values(ShutdownSignal).filter((signal) => signal !== ShutdownSignal.SIGHUP),
    { useProcessExit: true },
  );
  if (config.runsApi) {
    const contract = app.get(Contract);
    SwaggerModule.setup(DOCS_ROUTE, app, contract.document as unknown as OpenAPIObject, {
      raw: false,
      customSiteTitle: 'Image generation service API',
      patchDocumentOnRequest: <TRequest>(request: TRequest) =>
        contract.documentFor(servedServer(config, request as Request)) as unknown as OpenAPIObject,
    });
    // Static files built with the service (npm run build); no key needed to load the page, only to use it.
    app.useStaticAssets(fileURLToPath(new URL('./playground/', import.meta.url)), {
      prefix: `/${PLAYGROUND_ROUTE}`,
      // Not content-hashed: a browser asks again each time, and gets 304 while the build is the same.
      maxAge: 0,
    });
    mountQueueBoard(app);
  }
  await app.listen(config.port, config.host);
  // A worker answers only its health and metrics; clients reach an API process at its public URL.
  const publicUrl = config.role === 'worker' ? '' : `, public URL ${config.publicBaseUrl}`;
  logger.log(`Serving role "${config.role}" on port ${config.port}${publicUrl}`, 'Bootstrap');
}

/** ROLE=migrate: applies pending migrations (under the advisory lock every role takes at boot) and exits. */
async function migrate(config: AppConfig): Promise<void> {
  const logger = new JsonLogger(createRootLogger(config));
  if (config.databaseUrl) await waitForDatabase(config.databaseUrl, logger);
  const app = await NestFactory.createApplicationContext(AppModule.forRole(config), { logger });
  logger.log('The database schema is up to date', 'Migrate');
  await app.close();
}

let config: AppConfig;
try {
  config = loadConfig();
  assertServingSettings(config);
} catch (error) {
  process.stderr.write(`${error instanceof ConfigError ? error.message : String(error)}\n`);
  process.exit(1);
}
(config.role === 'migrate' ? migrate(config) : bootstrap(config)).catch((error: unknown) => {
  process.stderr.write(`Startup failed: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
