import type { components } from '../generated/openapi.js';
import type { SignedMediaUrls } from '../media/media-urls.js';

type JobAcceptedSchema = components['schemas']['JobAccepted'];
type JobFinishedSchema = components['schemas']['JobFinished'];

/** The result paths a creation answer names: signed like the item's, so they work once the job is complete. */
export type ResultUrls = Pick<SignedMediaUrls, 'preview' | 'stock'>;

export class JobAcceptedDto implements JobAcceptedSchema {
  history_item_id: string;
  preview_image: string;
  stock_image: string;
  status: 'pending';

  static of(historyItemId: string, urls: ResultUrls): JobAcceptedDto {
    return {
      history_item_id: historyItemId,
      preview_image: urls.preview,
      stock_image: urls.stock,
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

  static of(historyItemId: string, status: JobFinishedDto['status'], urls: ResultUrls): JobFinishedDto {
    return { ...JobAcceptedDto.of(historyItemId, urls), status };
  }
}
