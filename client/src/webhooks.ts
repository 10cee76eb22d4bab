/**
 * Webhook verification for receivers (Node, or any runtime with Web Crypto): deliveries are signed per Standard
 * Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`), with the secret of `GET /user/webhook-secret`.
 */
import { Webhook } from 'standardwebhooks';
import type { components } from './generated/openapi.js';

export type WebhookEvent = components['schemas']['WebhookEvent'];

/**
 * The delivered event when `body` (the raw request body, unparsed) carries a valid signature made with `secret` in
 * the last five minutes; throws otherwise. Both secrets may be tried during a rotation.
 */
export function verifyWebhook(
  secret: string,
  body: string,
  headers: Headers | Record<string, string | string[] | undefined>,
): WebhookEvent {
  const get = (name: string): string => {
    const value = headers instanceof Headers ? headers.get(name) : headers[name];
    return (Array.isArray(value) ? value[0] : value) ?? '';
  };
  return new Webhook(secret).verify(body, {
    'webhook-id': get('webhook-id'),
    'webhook-timestamp': get('webhook-timestamp'),
    'webhook-signature': get('webhook-signature'),
  }) as WebhookEvent;
}
