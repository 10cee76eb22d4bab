import { Controller, Get } from '@nestjs/common';
import { CurrentUser, type Principal } from '../auth/auth.decorators.js';
import type { components } from '../generated/openapi.js';
import { UsageService } from './usage.service.js';

@Controller('user/usage')
export class UsageController {
  constructor(private readonly usage: UsageService) {}

  @Get()
  get(@CurrentUser() user: Principal): Promise<components['schemas']['Usage']> {
    return this.usage.of(user.userId);
  }
}
