import { Transform } from 'class-transformer';
import { IsBoolean, IsDefined, IsIn, IsInt, IsOptional, Matches, Max, Min, ValidateIf } from 'class-validator';
import { CATALOG_ID } from '../catalog/catalog.js';
import { IsTheOnlyProperty, wholeNumberParameter } from '../common/validation.js';
import type { components, operations } from '../generated/openapi.js';
import type { JobStatus } from '../jobs/history-item.entity.js';
import type { HistoryItemDto } from '../jobs/history-item.dto.js';

type HistoryPageSchema = components['schemas']['HistoryPage'];
type HistoryListQuery = NonNullable<operations['listHistoryItems']['parameters']['query']>;
type FeedbackSchema = components['schemas']['FeedbackRequest'];

const STATUSES: readonly JobStatus[] = ['pending', 'complete', 'error'];
const MAX_LIMIT = 100;
const PAGE_MESSAGE = 'an integer of at least 1';
const LIMIT_MESSAGE = `an integer from 1 to ${MAX_LIMIT}`;
const FEEDBACK_MESSAGE = 'the body must be {"like": true, false or null} and nothing else';

/** `GET /user/generation-history` query parameters; a parameter given twice is refused, not half-read. */
export class HistoryListQueryDto implements HistoryListQuery {
  @IsOptional()
  @Transform(wholeNumberParameter)
  @IsInt({ message: PAGE_MESSAGE })
  @Min(1, { message: PAGE_MESSAGE })
  @Max(Number.MAX_SAFE_INTEGER, { message: PAGE_MESSAGE })
  page?: number;

  @IsOptional()
  @Transform(wholeNumberParameter)
  @IsInt({ message: LIMIT_MESSAGE })
  @Min(1, { message: LIMIT_MESSAGE })
  @Max(MAX_LIMIT, { message: LIMIT_MESSAGE })
  limit?: number;

  @IsOptional()
  @IsIn(STATUSES, { message: `must be one of ${STATUSES.join(', ')}` })
  status?: JobStatus;

  @IsOptional()
  // Any id of the pattern: a withdrawn tool's items stay listed, and an id that is no type's lists nothing.
  @Matches(CATALOG_ID, { message: 'must be a generation type id from GET /generation/generationTypes' })
  generation_type?: HistoryListQuery['generation_type'];
}

/** Feedback: exactly `{"like": true | false | null}`; anything else is refused rather than half-understood. */
export class FeedbackDto implements FeedbackSchema {
  @IsDefined({ message: FEEDBACK_MESSAGE })
  @IsTheOnlyProperty({ message: FEEDBACK_MESSAGE })
  @ValidateIf((body: FeedbackDto) => body.like !== null)
  @IsBoolean({ message: FEEDBACK_MESSAGE })
  like: boolean | null;
}

export class HistoryPageDto implements HistoryPageSchema {
  items: HistoryItemDto[];
  page: number;
  limit: number;
  total: number;
  total_pages: number;
}
