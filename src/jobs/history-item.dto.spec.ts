import { HistoryItemDto } from './history-item.dto.js';
import type { HistoryItemRow } from './history.repository.js';

const CREATED = new Date('2025-06-01T12:00:00.000Z');
const ENDED = new Date('2025-06-01T12:00:14.512Z');

function row(status: HistoryItemRow['status']): HistoryItemRow {
  return {
    id: '3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44',
    tool: 'fashion_swap',
    generationType: 'fashion_swap_full',
    status,
    like: null,
    errorCode: status === 'error' ? 'engine_failed' : null,
    errorMessage: status === 'error' ? 'The engine failed.' : null,
    createdAt: CREATED,
    updatedAt: status === 'pending' ? CREATED : ENDED,
    completedAt: status === 'pending' ? null : ENDED,
    webhookUrl: null,
    webhookState: null,
    webhookAttempts: 0,
    webhookLastAttemptAt: null,
    webhookLastStatus: null,
  };
}

describe('HistoryItemDto.from expires_at', () => {
  const thirtyDays = { mediaPublicBaseUrl: 'http://localhost:3000', historyRetentionMs: 30 * 86_400_000 };

  it.each(['complete', 'error'] as const)(
    'is completed_at plus the retention once the item is final (%s)',
    (status) => {
      const sut = HistoryItemDto.from(row(status), thirtyDays);

      expect(sut.expires_at).toBe('2025-07-01T12:00:14.512Z');
    },
  );

  it('is null while the item is pending', () => {
    expect(HistoryItemDto.from(row('pending'), thirtyDays).expires_at).toBeNull();
  });

  it('is null for a final item when items are kept until deleted', () => {
    const sut = HistoryItemDto.from(row('complete'), { ...thirtyDays, historyRetentionMs: undefined });

    expect(sut.expires_at).toBeNull();
  });
});
