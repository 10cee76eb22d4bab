import { type DynamicModule, Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { JobsModule } from '../jobs/jobs.module.js';
import { WebhookDeliveries } from './webhook-deliveries.js';
import { WebhookSecret } from './webhook-secret.entity.js';
import { WebhookSecretRepository } from './webhook-secret.repository.js';
import { WebhooksController } from './webhooks.controller.js';
import { WebhooksService } from './webhooks.service.js';

export const WEBHOOK_ENTITIES = [WebhookSecret];

/** Webhooks: every role queues the messages of the jobs it ends; workers deliver them; the API serves the secret. */
@Module({})
export class WebhooksModule {
  static forRole({ api }: { api: boolean }): DynamicModule {
    return {
      module: WebhooksModule,
      imports: [TypeOrmModule.forFeature(WEBHOOK_ENTITIES), JobsModule],
      controllers: api ? [WebhooksController] : [],
      providers: [WebhookSecretRepository, WebhooksService, WebhookDeliveries],
    };
  }
}
