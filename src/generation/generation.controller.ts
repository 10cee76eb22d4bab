import { Controller, Post, Req, Res } from '@nestjs/common';
import type { Request, Response } from 'express';
import { CurrentUser, type Principal } from '../auth/auth.decorators.js';
import { Draining } from '../common/draining.js';
import { holdOpen, preferredWait } from '../common/prefer.js';
import { AppConfig } from '../config/config.js';
import { FairShare } from '../users/fair-share.js';
import { GenerationService } from './generation.service.js';

@Controller('generation')
export class GenerationController {
  constructor(
    private readonly generation: GenerationService,
    private readonly config: AppConfig,
    private readonly draining: Draining,
    private readonly fairShare: FairShare,
  ) {}

  /** Served with and without the trailing slash the specification gives it. */
  @Post(['generate_image_v2', 'generate_image_v2/'])
  async create(@CurrentUser() user: Principal, @Req() request: Request, @Res() response: Response): Promise<void> {
    // A malformed Prefer is refused before the upload is read.
    const wait = preferredWait(request.headers.prefer);
    // Held from the first byte to the answer: refused before the upload is read, never after its job was accepted.
    if (wait !== undefined) await this.fairShare.take(user.userId, 'held', response);
    let answer = await this.generation.create(user.userId, request, response);
    if (wait !== undefined && answer.status === 202) {
      holdOpen(request, response, wait, this.config.httpIdleTimeoutMs, this.draining.signal);
      answer = await this.generation.awaitOutcome(user.userId, answer, wait);
    }
    response.status(answer.status).set(answer.headers).json(answer.body);
  }
}
