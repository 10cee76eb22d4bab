import {
  Body,
  Controller,
  Delete,
  Get,
  HttpCode,
  Param,
  ParseUUIDPipe,
  Patch,
  Post,
  Query,
  Req,
  Res,
} from '@nestjs/common';
import type { Request, Response } from 'express';
import { CurrentUser, type Principal, StillAuthorized } from '../auth/auth.decorators.js';
import { Draining } from '../common/draining.js';
import { holdOpen, preferredWait } from '../common/prefer.js';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { FairShare } from '../users/fair-share.js';
import type { HistoryItemDto } from '../jobs/history-item.dto.js';
import { FeedbackDto, HistoryListQueryDto, type HistoryPageDto } from './history.dto.js';
import { HistoryStreams, type StreamAccess } from './history-streams.js';
import { HistoryService } from './history.service.js';

const DEFAULT_LIMIT = 20;

/** The `{id}` of the history paths: a UUID, refused the way the API refuses any field, compared in lower case. */
const HistoryItemId = () =>
  Param(
    'id',
    new ParseUUIDPipe({
      exceptionFactory: () => {
        const message = 'must be a history_item_id (a UUID)';
        return new DomainError('validation_failed', `Invalid id: ${message}.`, { errors: [{ field: 'id', message }] });
      },
    }),
    { transform: (id: string) => id.toLowerCase() },
  );

@Controller('user/generation-history')
export class HistoryController {
  constructor(
    private readonly history: HistoryService,
    private readonly streams: HistoryStreams,
    private readonly config: AppConfig,
    private readonly draining: Draining,
    private readonly fairShare: FairShare,
  ) {}

  @Get()
  list(@CurrentUser() user: Principal, @Query() query: HistoryListQueryDto): Promise<HistoryPageDto> {
    return this.history.list(user.userId, {
      page: query.page ?? 1,
      limit: query.limit ?? DEFAULT_LIMIT,
      status: query.status,
      generationType: query.generation_type,
    });
  }

  @Get(':id')
  async get(
    @CurrentUser() user: Principal,
    @HistoryItemId() id: string,
    @Req() request: Request,
    @Res({ passthrough: true }) response: Response,
  ): Promise<HistoryItemDto> {
    const wait = preferredWait(request.headers.prefer);
    if (wait === undefined) return this.history.get(user.userId, id);
    await this.fairShare.take(user.userId, 'held', response);
    holdOpen(request, response, wait, this.config.httpIdleTimeoutMs, this.draining.signal);
    const item = await this.history.get(user.userId, id, wait);
    response.setHeader('Preference-Applied', `wait=${wait}`);
    return item;
  }

  @Get(':id/events')
  async events(
    @CurrentUser() user: Principal,
    @HistoryItemId() id: string,
    @StillAuthorized() access: StreamAccess,
    @Res() response: Response,
  ): Promise<void> {
    await this.fairShare.take(user.userId, 'streams', response);
    await this.streams.followItem(user.userId, id, response, access);
  }

  @Post(':id/cancel')
  @HttpCode(200)
  cancel(@CurrentUser() user: Principal, @HistoryItemId() id: string): Promise<HistoryItemDto> {
    return this.history.cancel(user.userId, id);
  }

  @Patch('feedback/:id')
  feedback(
    @CurrentUser() user: Principal,
    @HistoryItemId() id: string,
    @Body() body: FeedbackDto,
  ): Promise<HistoryItemDto> {
    return this.history.setFeedback(user.userId, id, body.like);
  }

  @Delete(':id')
  @HttpCode(204)
  async delete(@CurrentUser() user: Principal, @HistoryItemId() id: string): Promise<void> {
    await this.history.delete(user.userId, id);
  }
}

/** The caller's whole history as an event stream, for history pages. */
@Controller('user')
export class UserEventsController {
  constructor(
    private readonly streams: HistoryStreams,
    private readonly fairShare: FairShare,
  ) {}

  @Get('events')
  async events(
    @CurrentUser() user: Principal,
    @StillAuthorized() access: StreamAccess,
    @Res() response: Response,
  ): Promise<void> {
    await this.fairShare.take(user.userId, 'streams', response);
    await this.streams.followUser(user.userId, response, access);
  }
}
