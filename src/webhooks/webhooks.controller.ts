import { Controller, Get, HttpCode, Post } from '@nestjs/common';
import { CurrentUser, type Principal } from '../auth/auth.decorators.js';
import type { components } from '../generated/openapi.js';
import { WebhooksService } from './webhooks.service.js';

type WebhookSecretBody = components['schemas']['WebhookSecret'];

@Controller('user/webhook-secret')
export class WebhooksController {
  constructor(private readonly webhooks: WebhooksService) {}

  @Get()
  async current(@CurrentUser() user: Principal): Promise<WebhookSecretBody> {
    return { secret: await this.webhooks.currentSecret(user.userId) };
  }

  @Post('rotate')
  @HttpCode(200)
  async rotate(@CurrentUser() user: Principal): Promise<WebhookSecretBody> {
    return { secret: await this.webhooks.rotateSecret(user.userId) };
  }
}
