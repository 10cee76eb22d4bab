import { randomBytes } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { Database } from '../database/database.js';

/** After a rotation, the previous secret keeps signing this long (Standard Webhooks' zero-downtime rotation). */
const PREVIOUS_SECRET_HOURS = 24;

function newSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

/** Every user's webhook signing secret, and the statements on `webhook_secrets`. */
@Injectable()
export class WebhookSecrets {
  constructor(private readonly db: Database) {}

  /** The user's secret, made on first use (by a request or a first delivery, whichever comes first). */
  async current(userId: string): Promise<string> {
    const [row] = await this.db.query<{ secret: string }>({
      text: `WITH made AS (
               INSERT INTO webhook_secrets (user_id, secret) VALUES ($1, $2)
               ON CONFLICT (user_id) DO NOTHING RETURNING secret
             )
             SELECT secret FROM made UNION ALL SELECT secret FROM webhook_secrets WHERE user_id = $1 LIMIT 1`,
      values: [userId, newSecret()],
    });
    return row.secret;
  }

  /** A new secret for the user; the one it replaces keeps signing for PREVIOUS_SECRET_HOURS. */
  async rotate(userId: string): Promise<string> {
    const [row] = await this.db.query<{ secret: string }>({
      text: `INSERT INTO webhook_secrets (user_id, secret) VALUES ($1, $2)
             ON CONFLICT (user_id) DO UPDATE
               SET previous_secret = webhook_secrets.secret,
                   previous_until = now() + make_interval(hours => $3),
                   secret = EXCLUDED.secret, rotated_at = now()
             RETURNING secret`,
      values: [userId, newSecret(), PREVIOUS_SECRET_HOURS],
    });
    return row.secret;
  }

  /** The secrets a delivery is signed with now: the current one, and the previous one while it still signs. */
  async signing(userId: string): Promise<string[]> {
    const current = await this.current(userId);
    const [row] = await this.db.query<{ previous: string | null }>({
      text: `SELECT previous_secret AS previous FROM webhook_secrets WHERE user_id = $1 AND previous_until > now()`,
      values: [userId],
    });
    return row?.previous ? [current, row.previous] : [current];
  }
}
