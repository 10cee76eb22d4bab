import type { components } from '../generated/openapi.js';
import { mediaPath } from '../media/media.js';

type JobAcceptedSchema = components['schemas']['JobAccepted'];
type JobFinishedSchema = components['schemas']['JobFinished'];

export class JobAcceptedDto implements JobAcceptedSchema {
  history_item_id: string;
  preview_image: string;
  stock_image: string;
  status: 'pending';

  static of(historyItemId: string): JobAcceptedDto {
    return {
      history_item_id: historyItemId,
      preview_image: mediaPath(historyItemId, 'preview'),
      stock_image: mediaPath(historyItemId, 'stock'),
      status: 'pending',
    };
  }
}

/** The creation answer of a job that ended while the request waited (`Prefer: wait`). */
export class JobFinishedDto implements JobFinishedSchema {
  history_item_id: string;
  preview_image: string;
  stock_image: string;
  status: 'complete' | 'error';

  static of(historyItemId: string, status: JobFinishedDto['status']): JobFinishedDto {
    return { ...JobAcceptedDto.of(historyItemId), status };
  }
}
