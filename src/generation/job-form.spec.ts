import { DomainError } from '../common/problem.js';
import { checkToolForm, checkWebhookEvents } from './job-form.js';

const URL = 'https://app.example.com/hooks';

function refusal(work: () => unknown): DomainError {
  try {
    work();
  } catch (error) {
    if (error instanceof DomainError) return error;
    throw error;
  }
  throw new Error('not refused');
}

describe('checkWebhookEvents (webhook_events, from a repeated form field or a JSON array)', () => {
  it('is the default, the final state alone, when absent or when it asks for that alone', () => {
    expect(checkWebhookEvents(undefined, false)).toBeNull();
    expect(checkWebhookEvents(['completed'], true)).toBeNull();
  });

  it('keeps the events asked for in one order, each once, the final state always among them', () => {
    expect(checkWebhookEvents(['progress', 'started', 'progress'], true)).toEqual(['started', 'progress', 'completed']);
  });

  it.each([[['finished']], [['started', '']], [[1]]])('refuses %j as 422 naming webhook_events', (values) => {
    const sut = refusal(() => checkWebhookEvents(values, true));

    expect([sut.status, sut.code, sut.options.errors?.[0].field]).toEqual([
      422,
      'invalid_webhook_events',
      'webhook_events',
    ]);
  });

  it('refuses events without a webhook_url to send them to', () => {
    expect(refusal(() => checkWebhookEvents(['started'], false)).code).toBe('invalid_webhook_events');
  });
});

describe('checkToolForm with webhook_events', () => {
  const form = (texts: [string, string][]) =>
    checkToolForm({ texts: [['tool', 'fashion_card'], ...texts], files: ['clothes'] });

  it('takes the field once per event, as a browser sends a repeated field', () => {
    const sut = form([
      ['webhook_url', URL],
      ['webhook_events', 'started'],
      ['webhook_events', 'progress'],
    ]);

    expect(sut.webhookEvents).toEqual(['started', 'progress', 'completed']);
  });

  it('still refuses any other field sent twice', () => {
    const sut = refusal(() =>
      form([
        ['webhook_url', URL],
        ['webhook_url', URL],
      ]),
    );

    expect(sut.code).toBe('unexpected_field');
  });

  it('refuses the field sent as a file', () => {
    const sut = refusal(() =>
      checkToolForm({ texts: [['tool', 'fashion_card']], files: ['clothes', 'webhook_events'] }),
    );

    expect([sut.code, sut.options.errors?.[0].field]).toEqual(['validation_failed', 'webhook_events']);
  });
});
