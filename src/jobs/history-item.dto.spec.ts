import { MediaUrls } from '../media/media-urls.js';
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
    startedAt: null,
    outputSeeds: status === 'complete' ? [7] : null,
  };
}

describe('HistoryItemDto.from expires_at', () => {
  const mediaUrls = new MediaUrls('k'.repeat(32), undefined, 3_600_000, 'http://localhost:3000');
  const thirtyDays = { mediaUrls, historyRetentionMs: 30 * 86_400_000 };

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

describe('HistoryItemDto.from media URLs', () => {
  const mediaUrls = new MediaUrls('k'.repeat(32), undefined, 3_600_000, 'https://cdn.example.com/results');
  const settings = { mediaUrls, historyRetentionMs: undefined };
  const READ_AT = Date.parse('2025-06-01T12:01:30.400Z');

  it('signs the result paths at the read, for MEDIA_URL_TTL, and says until when', () => {
    const sut = HistoryItemDto.from(row('complete'), settings, undefined, undefined, READ_AT);

    const id = '3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44';
    const expires = Date.parse('2025-06-01T13:01:30.000Z') / 1000;
    expect(sut.preview_url).toMatch(
      new RegExp(`^media/${id}/preview\\.webp\\?expires=${expires}&signature=[\\w-]{43}$`),
    );
    expect(sut.stock_url).toMatch(new RegExp(`^media/${id}/stock\\.jpg\\?expires=${expires}&signature=[\\w-]{43}$`));
    expect(sut.output_url).toBe(`https://cdn.example.com/results/${sut.stock_url}`);
    expect(sut.media_urls_expire_at).toBe('2025-06-01T13:01:30.000Z');
  });

  it('signs afresh on every read', () => {
    const first = HistoryItemDto.from(row('complete'), settings, undefined, undefined, READ_AT);
    const later = HistoryItemDto.from(row('complete'), settings, undefined, undefined, READ_AT + 60_000);

    expect(later.stock_url).not.toBe(first.stock_url);
    expect(later.media_urls_expire_at).toBe('2025-06-01T13:02:30.000Z');
  });

  it.each(['pending', 'error'] as const)('has no URLs and no expiry while there is no result (%s)', (status) => {
    const sut = HistoryItemDto.from(row(status), settings, undefined, undefined, READ_AT);

    expect(sut).toMatchObject({ preview_url: null, stock_url: null, output_url: null, media_urls_expire_at: null });
  });
});

describe('HistoryItemDto.from: where a job is', () => {
  const settings = {
    mediaUrls: new MediaUrls('k'.repeat(32), undefined, 3_600_000, 'http://localhost:3000'),
    historyRetentionMs: undefined,
  };
  const STARTED = new Date('2025-06-01T12:00:02.004Z');

  it('shows the place in line of a queued job, and no metrics', () => {
    const sut = HistoryItemDto.from(row('pending'), settings, undefined, 3);

    expect(sut).toMatchObject({ started_at: null, queue_position: 3, metrics: null });
  });

  it('shows no place in line once the job started, whatever the line says', () => {
    const sut = HistoryItemDto.from({ ...row('pending'), startedAt: STARTED }, settings, 0.2, 1);

    expect(sut).toMatchObject({ started_at: STARTED.toISOString(), queue_position: null, metrics: null });
  });

  it('splits a final job into its wait and its run', () => {
    const sut = HistoryItemDto.from({ ...row('complete'), startedAt: STARTED }, settings, undefined, 2);

    expect(sut).toMatchObject({ queue_position: null, metrics: { queue_seconds: 2.004, run_seconds: 12.508 } });
  });

  it('counts only waiting for a job that ended without starting', () => {
    const sut = HistoryItemDto.from(row('error'), settings);

    expect(sut.metrics).toEqual({ queue_seconds: 14.512, run_seconds: null });
  });
});

describe('HistoryItemDto.from outputs', () => {
  const mediaUrls = new MediaUrls('k'.repeat(32), undefined, 3_600_000, 'https://cdn.example.com/results');
  const settings = { mediaUrls, historyRetentionMs: undefined };
  const id = '3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44';

  it("lists every result with its seed, the first one's URLs the item's own, the others' files numbered from 1", () => {
    const sut = HistoryItemDto.from({ ...row('complete'), outputSeeds: [11, 12, null] }, settings);

    expect(sut.outputs).toHaveLength(3);
    expect(sut.outputs![0]).toEqual({
      preview_url: sut.preview_url,
      stock_url: sut.stock_url,
      output_url: sut.output_url,
      seed: 11,
    });
    expect(sut.outputs![1].stock_url).toMatch(new RegExp(`^media/${id}/stock-1\\.jpg\\?expires=\\d+&signature=`));
    expect(sut.outputs![2]).toMatchObject({
      preview_url: expect.stringMatching(new RegExp(`^media/${id}/preview-2\\.webp\\?`)),
      output_url: expect.stringMatching(/^https:\/\/cdn\.example\.com\/results\/media\//),
      seed: null,
    });
  });

  it('shows the one result of an item completed before results were counted, its seed unknown', () => {
    const sut = HistoryItemDto.from({ ...row('complete'), outputSeeds: null }, settings);

    expect(sut.outputs).toEqual([
      { preview_url: sut.preview_url, stock_url: sut.stock_url, output_url: sut.output_url, seed: null },
    ]);
  });

  it.each(['pending', 'error'] as const)('is null while there is no result (%s)', (status) => {
    expect(HistoryItemDto.from(row(status), settings).outputs).toBeNull();
  });
});
