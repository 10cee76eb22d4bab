import { randomBytes } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { WebhookSecretRepository } from './webhook-secret.repository.js';

/** After a rotation, the previous secret keeps signing this long (Standard Webhooks' zero-downtime rotation). */
const PREVIOUS_SECRET_HOURS = 24;

function newSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/** Every user's webhook signing secret. */
@Injectable()
export class WebhooksService {
  constructor(private readonly secrets: WebhookSecretRepository) {}

  /** The user's secret, made on first use (by a request or a first delivery, whichever comes first). */
  async currentSecret(userId: string): Promise<string> {
    return this.secrets.current(userId, newSecret());
  }

  /** A new secret for the user; the one it replaces keeps signing for PREVIOUS_SECRET_HOURS. */
  async rotateSecret(userId: string): Promise<string> {
    const secret = newSecret();
    await this.secrets.rotate(userId, secret, PREVIOUS_SECRET_HOURS);
    return secret;
  }

  /** The secrets a delivery is signed with now: the current one, and the previous one while it still signs. */
  async signingSecrets(userId: string): Promise<string[]> {
    const current = await this.currentSecret(userId);
    const previous = await this.secrets.previousStillSigning(userId);
    return previous ? [current, previous] : [current];
  }
}
