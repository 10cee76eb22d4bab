import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ApiKeyService } from './auth/api-key.service.js';
import { ApiKeysModule } from './auth/auth.module.js';
import { ConfigError, loadConfig } from './config/config.js';
import { ConfigModule } from './config/config.module.js';
import { DatabaseModule } from './database/database.module.js';

const USAGE = `Usage:
  npm run --silent apikey -- create --user <name>   create a key (and the user if new); prints only the key
  npm run apikey -- list                            list keys: prefix, user, created, revoked
  npm run apikey -- revoke <key-or-prefix>          revoke a key
`;

async function main(args: string[]): Promise<number> {
  const [command, ...rest] = args;
  if (!['create', 'list', 'revoke'].includes(command ?? '')) {
    process.stderr.write(USAGE);
    return 2;
  }
  const config = loadConfig();

  @Module({ imports: [ConfigModule.forRoot(config), DatabaseModule, ApiKeysModule] })
  class CliModule {}

  const app = await NestFactory.createApplicationContext(CliModule, { logger: false });
  try {
    const apiKeys = app.get(ApiKeyService);
    if (command === 'create') {
      const userFlag = rest.indexOf('--user');
      const user = userFlag >= 0 ? rest[userFlag + 1]?.trim() : undefined;
      if (!user) {
        process.stderr.write(USAGE);
        return 2;
      }
      process.stdout.write(`${await apiKeys.create(user)}\n`);
    } else if (command === 'list') {
      for (const key of await apiKeys.list()) {
        const state = key.revokedAt ? `revoked ${key.revokedAt.toISOString()}` : 'active';
        process.stdout.write(`${key.prefix}\t${key.user}\t${key.createdAt.toISOString()}\t${state}\n`);
      }
    } else {
      const revoked = rest[0] ? await apiKeys.revoke(rest[0]) : 0;
      if (revoked === 0) {
        process.stderr.write('No active key matches.\n');
        return 1;
      }
      process.stdout.write(`Revoked ${revoked} key.\n`);
    }
    return 0;
  } finally {
    await app.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`${error instanceof ConfigError ? error.message : `apikey: ${String(error)}`}\n`);
    process.exit(1);
  },
);
