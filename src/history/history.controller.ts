import { Body, Controller, Delete, Get, HttpCode, Param, Patch, Post, Query, Req, Res } from '@nestjs/common';
import type { Request, Response } from 'express';
import { CurrentUser, type Principal } from '../auth/auth.decorators.js';
import { isGenerationType } from '../catalog/catalog.js';
import { holdOpen, preferredWait } from '../common/prefer.js';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { isUuid } from '../common/uuid.js';
import type { JobStatus } from '../jobs/history-item.entity.js';
import type { HistoryItemDto, HistoryPageDto } from './history.dto.js';
import { HistoryStreams } from './history-streams.js';
import { type HistoryQuery, HistoryService } from './history.service.js';

const STATUSES: readonly string[] = ['pending', 'complete', 'error'] satisfies JobStatus[];
const MAX_LIMIT = 100;

@Controller('user/generation-history')
export class HistoryController {
  constructor(
    private readonly history: HistoryService,
    private readonly streams: HistoryStreams,
    private readonly config: AppConfig,
  ) {}

  @Get()
  list(@CurrentUser() user: Principal, @Query() query: Record<string, unknown>): Promise<HistoryPageDto> {
    return this.history.list(user.userId, parseListQuery(query));
  }

  @Get(':id')
  async get(
    @CurrentUser() user: Principal,
    @Param('id') id: string,
    @Req() request: Request,
    @Res({ passthrough: true }) response: Response,
  ): Promise<HistoryItemDto> {
    const itemId = historyItemId(id);
    const wait = preferredWait(request.headers.prefer);
    if (wait === undefined) return this.history.get(user.userId, itemId);
    holdOpen(request, response, wait, this.config.httpIdleTimeoutMs);
    const item = await this.history.get(user.userId, itemId, wait);
    response.setHeader('Preference-Applied', `wait=${wait}`);
    return item;
  }

  @Get(':id/events')
  async events(@CurrentUser() user: Principal, @Param('id') id: string, @Res() response: Response): Promise<void> {
    await this.streams.followItem(user.userId, historyItemId(id), response);
  }

  @Post(':id/cancel')
  @HttpCode(200)
  cancel(@CurrentUser() user: Principal, @Param('id') id: string): Promise<HistoryItemDto> {
    return this.history.cancel(user.userId, historyItemId(id));
  }

  @Patch('feedback/:id')
  feedback(
    @CurrentUser() user: Principal,
    @Param('id') id: string,
    @Req() request: Request,
    @Body() body: unknown,
  ): Promise<HistoryItemDto> {
    const itemId = historyItemId(id);
    return this.history.setFeedback(user.userId, itemId, parseFeedback(request, body));
  }

  @Delete(':id')
  @HttpCode(204)
  async delete(@CurrentUser() user: Principal, @Param('id') id: string): Promise<void> {
    await this.history.delete(user.userId, historyItemId(id));
  }
}

function historyItemId(id: string): string {
  if (!isUuid(id)) throw invalid('id', 'must be a history_item_id (a UUID)');
  return id.toLowerCase();
}

function parseListQuery(query: Record<string, unknown>): HistoryQuery {
  const page = integerParam(query, 'page', 1, 1, Number.MAX_SAFE_INTEGER);
  const limit = integerParam(query, 'limit', 20, 1, MAX_LIMIT);
  const status = query.status;
  if (status !== undefined && (typeof status !== 'string' || !STATUSES.includes(status))) {
    throw invalid('status', `must be one of ${STATUSES.join(', ')}`);
  }
  const generationType = query.generation_type;
  if (generationType !== undefined && (typeof generationType !== 'string' || !isGenerationType(generationType))) {
    throw invalid('generation_type', 'must be a generation type id from GET /generation/generationTypes');
  }
  return { page, limit, status: status as JobStatus | undefined, generationType: generationType };
}

function integerParam(
  query: Record<string, unknown>,
  name: string,
  fallback: number,
  min: number,
  max: number,
): number {
  const value = query[name];
  if (value === undefined) return fallback;
  const parsed = typeof value === 'string' && /^\d{1,16}$/.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(parsed) || parsed < min || parsed > max) {
    throw invalid(
      name,
      max === Number.MAX_SAFE_INTEGER ? `an integer of at least ${min}` : `an integer from ${min} to ${max}`,
    );
  }
  return parsed;
}

/** Exactly `{"like": true|false|null}` as JSON; anything else is refused rather than half-understood. */
function parseFeedback(request: Request, body: unknown): boolean | null {
  // `is` answers null for a request without a body: that one is told `like` is missing, below.
  if (request.is('application/json') === false) {
    throw new DomainError('bad_request', 'The request body must be application/json.');
  }
  const isObject = typeof body === 'object' && body !== null && !Array.isArray(body);
  const keys = isObject ? Object.keys(body) : [];
  const like = isObject ? (body as { like?: unknown }).like : undefined;
  if (keys.length !== 1 || keys[0] !== 'like' || !(like === null || typeof like === 'boolean')) {
    throw invalid('like', 'the body must be {"like": true, false or null} and nothing else');
  }
  return like;
}

function invalid(field: string, message: string): DomainError {
  return new DomainError('validation_failed', `Invalid ${field}: ${message}.`, { errors: [{ field, message }] });
}

/** The caller's whole history as an event stream, for history pages. */
@Controller('user')
export class UserEventsController {
  constructor(private readonly streams: HistoryStreams) {}

  @Get('events')
  async events(@CurrentUser() user: Principal, @Res() response: Response): Promise<void> {
    await this.streams.followUser(user.userId, response);
  }
}
