import { Injectable, type OnApplicationBootstrap } from '@nestjs/common';
import { DatabaseLocation } from '../database/database.module.js';
import { ApiKeyService } from './api-key.service.js';

/** On a brand-new embedded database, prints one ready-to-use key so the README's curl examples work at once. */
@Injectable()
export class DemoKey implements OnApplicationBootstrap {
  constructor(
    private readonly location: DatabaseLocation,
    private readonly apiKeys: ApiKeyService,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    if (!this.location.embedded?.createdNow) return;
    const key = await this.apiKeys.create('demo');
    // Straight to the terminal, not the log: a key must never land in log storage.
    process.stdout.write(
      `\nA new embedded database was created with a demo user. Its API key, shown only this once:\n\n` +
        `  export IGS_API_KEY=${key}\n\n`,
    );
  }
}
