#!/usr/bin/env node
import 'reflect-metadata';
import { type DynamicModule, Global, type INestApplicationContext, Module, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { type CliCommand, parseCli, UsageError, USAGE } from './admin/cli-arguments.js';
import { type RemovalPlan, type Removed, UserRemoval } from './admin/user-removal.js';
import { ApiKeyService } from './auth/api-key.service.js';
import { ApiKeysModule } from './auth/auth.module.js';
import { type AppConfig, ConfigError, loadConfig, loadConfigWithRouting } from './config/config.js';
import { isWellFormedApiKey, lookupPrefix } from './common/api-key.js';
import { count } from './common/count.js';
import { DrainingModule } from './common/draining.module.js';
import { ConfigModule } from './config/config.module.js';
import { assertDatabaseReachable } from './database/data-source.js';
import { DatabaseModule } from './database/database.module.js';
import { JobsModule } from './jobs/jobs.module.js';
import { MediaModule } from './media/media.module.js';
import { Metrics } from './metrics/metrics.js';
import { RedisModule } from './redis/redis.module.js';
import { UserRepository } from './users/user.repository.js';
import { UsersModule } from './users/users.module.js';
import { FilesModule } from './files/files.module.js';

/** The job lifecycle's metrics, kept in this process and never served: the command line runs no metrics listener. */
@Global()
@Module({ providers: [Metrics], exports: [Metrics] })
class UnservedMetricsModule {}

@Module({
  imports: [
    DrainingModule.forRole({ api: false }),
    RedisModule,
    MediaModule,
    UnservedMetricsModule,
    JobsModule,
    UsersModule,
    FilesModule,
  ],
  providers: [UserRemoval],
})
class UserRemovalModule {}

/** What each command boots: only the keys and users commands' database, and for a removal Redis, queues and storage. */
function modulesFor(command: CliCommand): Type[] {
  if (command.name.startsWith('keys ')) return [ApiKeysModule];
  if (command.name === 'users delete') return [UserRemovalModule];
  return [UsersModule];
}

async function main(args: string[]): Promise<number> {
  let command: CliCommand;
  try {
    command = parseCli(args);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    process.stderr.write(`igs: ${error.message}\n\n${USAGE}`);
    return 2;
  }
  // Reads no database: a routing file is checked before it is put where the service reads it.
  if (command.name === 'routing check') return checkRouting(command.file);
  const config = loadConfig();
  // On stderr: stdout is what scripts read. An operator who forgot DATABASE_URL sees here why no key is found.
  if (!config.databaseUrl) {
    process.stderr.write(`igs: DATABASE_URL is unset: using the embedded database in ${config.embeddedDbDir}\n`);
  } else {
    // At once and in plain words, where the service waits for it: a person at a terminal is waiting too.
    await assertDatabaseReachable(config.databaseUrl);
  }
  const root: DynamicModule = {
    module: class CliModule {},
    imports: [ConfigModule.forRoot(config), DatabaseModule, ...modulesFor(command)],
  };
  const app = await NestFactory.createApplicationContext(root, { logger: false, abortOnError: false });
  try {
    return await run(command, app, config);
  } finally {
    await app.close();
  }
}

async function run(command: CliCommand, app: INestApplicationContext, config: AppConfig): Promise<number> {
  const print = (line: string) => process.stdout.write(`${line}\n`);
  switch (command.name) {
    case 'keys create':
      print(await app.get(ApiKeyService).create(command.user, { admin: command.admin }));
      return 0;
    case 'keys list':
      for (const key of await app.get(ApiKeyService).list()) {
        const state = key.revokedAt ? `revoked ${key.revokedAt.toISOString()}` : 'active';
        print([key.prefix, key.user, key.createdAt.toISOString(), state, ...(key.admin ? ['admin'] : [])].join('\t'));
      }
      return 0;
    case 'keys revoke': {
      const revoked = await app.get(ApiKeyService).revoke(command.keyOrPrefix);
      if (revoked === 0) {
        return fail(
          isWellFormedApiKey(command.keyOrPrefix)
            ? `No active key is the key given (prefix ${lookupPrefix(command.keyOrPrefix)}): nothing was revoked.`
            : 'No active key matches.',
        );
      }
      print(`Revoked ${revoked} key.`);
      return 0;
    }
    case 'users list':
      print(
        [
          'name',
          'created',
          'items',
          'pending',
          'max pending',
          'creations a minute',
          'uploads at once',
          'event streams',
          'held requests',
        ].join('\t'),
      );
      for (const user of await app.get(UserRepository).list()) {
        const own = (value: number | null, fallback: number) => (value === null ? `${fallback} (default)` : `${value}`);
        print(
          [
            user.name,
            user.createdAt.toISOString(),
            user.items,
            user.pending,
            own(user.maxPending, config.limitMaxPending),
            own(user.creationsPerMinute, config.limitCreationsPerMinute),
            own(user.concurrentUploads, config.limitConcurrentUploads),
            own(user.eventStreams, config.limitEventStreams),
            own(user.heldRequests, config.limitHeldRequests),
          ].join('\t'),
        );
      }
      return 0;
    case 'users delete': {
      const removal = app.get(UserRemoval);
      const plan = await removal.plan(command.user);
      if (!plan) return fail(`No user named "${command.user}".`);
      if (!command.yes) {
        print(`Would remove user "${plan.user.name}" with ${describePlan(plan)}.`);
        print('Nothing was changed; run again with --yes to remove them.');
        return 0;
      }
      print(`Removed user "${plan.user.name}" with ${describeRemoved(await removal.remove(plan))}.`);
      return 0;
    }
    case 'routing check':
      return checkRouting(command.file);
    case 'limits set':
    case 'limits reset': {
      // `limits set` carries the limits given; the others are undefined and stay as they are.
      const limits =
        command.name === 'limits set'
          ? command
          : {
              maxPending: null,
              creationsPerMinute: null,
              concurrentUploads: null,
              eventStreams: null,
              heldRequests: null,
            };
      if (!(await app.get(UserRepository).setLimits(command.user, limits))) {
        return fail(`No user named "${command.user}".`);
      }
      print(`Limits of "${command.user}" ${command.name === 'limits set' ? 'set' : 'reset'}; in effect within 10 s.`);
      return 0;
    }
  }
}

/** `igs routing check`: the file's tools and routes, or its problems (thrown as a ConfigError: exit 1). */
function checkRouting(file: string | undefined): number {
  const config = file === undefined ? loadConfig() : loadConfigWithRouting(file);
  if (config.enginesFile === undefined) return fail('Name a routing file, or set ENGINES_FILE.');
  const { catalog, engineRouting } = config;
  const print = (line: string) => process.stdout.write(`${line}\n`);
  print(`${config.enginesFile} passes the checks.`);
  for (const tool of catalog.tools) {
    const types = tool.generationTypes.map((type) => type.id).join(', ');
    print(`tool\t${tool.id}\t${tool.configured ? 'configured' : 'built-in'}\t${tool.title}\t${types}`);
  }
  for (const tool of catalog.withdrawn) print(`tool\t${tool.id}\twithdrawn\t${tool.title}`);
  for (const route of engineRouting.routes) print(`route\t${route.key}\t${route.engine} (${route.kind})`);
  return 0;
}

function fail(message: string): number {
  process.stderr.write(`${message}\n`);
  return 1;
}

function describePlan({ holdings }: RemovalPlan): string {
  return (
    `${count(holdings.keys, 'key')}, ${count(holdings.secrets, 'webhook secret')}, ` +
    `${count(holdings.items, 'history item')} (${holdings.pending} pending, to be canceled first) and their files`
  );
}

function describeRemoved(removed: Removed): string {
  return (
    `${count(removed.keys, 'key')}, ${count(removed.secrets, 'webhook secret')}, ` +
    `${count(removed.items, 'history item')} (${removed.canceled} pending, canceled first) and their files, ` +
    `${count(removed.redisKeys, 'Redis key')}, ${count(removed.storedFiles, 'stored file')}`
  );
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(
      `${error instanceof ConfigError ? error.message : `igs: ${error instanceof Error ? error.message : String(error)}`}\n`,
    );
    process.exit(1);
  },
);
