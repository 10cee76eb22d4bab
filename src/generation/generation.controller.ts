import { Controller, Post, Req, Res } from '@nestjs/common';
import type { Request, Response } from 'express';
import { CurrentUser, type Principal } from '../auth/auth.decorators.js';
import { GenerationService } from './generation.service.js';

@Controller('generation')
export class GenerationController {
  constructor(private readonly generation: GenerationService) {}

  /** Served with and without the trailing slash the specification gives it. */
  @Post(['generate_image_v2', 'generate_image_v2/'])
  async create(@CurrentUser() user: Principal, @Req() request: Request, @Res() response: Response): Promise<void> {
    const answer = await this.generation.create(user.userId, request, response);
    response.status(answer.status).set(answer.headers).json(answer.body);
  }
}
