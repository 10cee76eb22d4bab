import type { components } from '../generated/openapi.js';
import { mediaPath } from '../media/media.js';

type JobAcceptedSchema = components['schemas']['JobAccepted'];

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
