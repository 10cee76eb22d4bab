import { Injectable } from '@nestjs/common';
import { Database } from '../database/database.js';
import type { WebhookSecret } from './webhook-secret.entity.js';

/** Every statement on `webhook_secrets`. */
@Injectable()
export class WebhookSecretRepository {
  constructor(private readonly db: Database) {}

  /** The user's secret; `secretIfNew` becomes it when the user has none yet (atomically, whoever asks first). */
  async current(userId: string, secretIfNew: string): Promise<string> {
    const statement = {
      text: `WITH made AS (
               INSERT INTO webhook_secrets (user_id, secret) VALUES ($1, $2)
               ON CONFLICT (user_id) DO NOTHING RETURNING secret
             )
             SELECT secret FROM made UNION ALL SELECT secret FROM webhook_secrets WHERE user_id = $1 LIMIT 1`,
      values: [userId, secretIfNew],
    };
    // A second run is for when another session made the secret while the first ran: its insert waited for that row
    // and did nothing, and its snapshot, taken before that commit, does not show the row. The next statement sees it.
    for (let run = 0; run < 2; run++) {
      const [row] = await this.db.query<Pick<WebhookSecret, 'secret'>>(statement);
      if (row) return row.secret;
    }
    throw new Error(`no webhook secret could be made for user ${userId}`);
  }

  /** Makes `secret` the user's; the one it replaces keeps signing for `previousHours`. */
  async rotate(userId: string, secret: string, previousHours: number): Promise<void> {
    await this.db.query({
      text: `INSERT INTO webhook_secrets (user_id, secret) VALUES ($1, $2)
             ON CONFLICT (user_id) DO UPDATE
               SET previous_secret = webhook_secrets.secret,
                   previous_until = now() + make_interval(hours => $3),
                   secret = EXCLUDED.secret, rotated_at = now()`,
      values: [userId, secret, previousHours],
    });
  }

  /** The user's previous secret while it still signs. */
  async previousStillSigning(userId: string): Promise<string | undefined> {
    const [row] = await this.db.query<Pick<WebhookSecret, 'previousSecret'>>({
      text: `SELECT previous_secret AS "previousSecret" FROM webhook_secrets WHERE user_id = $1 AND previous_until > now()`,
      values: [userId],
    });
    return row?.previousSecret ?? undefined;
  }
}
