import { Check, Column, Entity, Index, JoinColumn, ManyToOne, PrimaryColumn, type Relation } from 'typeorm';
import { User } from '../auth/user.entity.js';
import type { ImageFormat } from '../common/image-format.js';
import type { components } from '../generated/openapi.js';

type HistoryItemSchema = components['schemas']['HistoryItem'];

export type JobStatus = HistoryItemSchema['status'];
export type JobErrorCode = NonNullable<HistoryItemSchema['error']>['code'];
export type WebhookState = NonNullable<HistoryItemSchema['webhook']>['state'];
/** A webhook message a job's receiver may ask for (`webhook_events`). */
export type WebhookEventName = 'started' | 'progress' | 'completed';

/** Where a stored input lives (private storage) and what its bytes were found to be at upload. */
export interface StoredInput {
  key: string;
  format: ImageFormat;
  width: number;
  height: number;
  bytes: number;
}

/** The keys of an item's stored inputs, for deleting them. */
export function inputKeysOf(inputs: Record<string, StoredInput>): string[] {
  return Object.values(inputs).map((input) => input.key);
}

/**
 * One generation job. The row is written before the job is queued, so it is the outbox the reconciler
 * re-enqueues from. List queries walk (user, [status], [generation_type], created_at, id) backwards; the retention
 * sweep walks final items by completed_at.
 */
@Entity({ name: 'history_items' })
@Check('history_items_status_check', `"status" IN ('pending', 'complete', 'error')`)
@Check('history_items_error_check', `("status" = 'error') = ("error_code" IS NOT NULL)`)
@Check('history_items_webhook_check', `("webhook_url" IS NULL) = ("webhook_state" IS NULL)`)
@Check('history_items_seed_check', `"seed" BETWEEN 0 AND 4294967295`)
@Check('history_items_num_outputs_check', `"num_outputs" BETWEEN 1 AND 4`)
@Index('history_items_user_created', ['userId', 'createdAt', 'id'])
@Index('history_items_user_status_created', ['userId', 'status', 'createdAt', 'id'])
@Index('history_items_user_type_created', ['userId', 'generationType', 'createdAt', 'id'])
@Index('history_items_user_status_type_created', ['userId', 'status', 'generationType', 'createdAt', 'id'])
@Index('history_items_pending_created', ['createdAt'], { where: `"status" = 'pending'` })
@Index('history_items_final_completed', ['completedAt'], { where: `"status" <> 'pending'` })
export class HistoryItem {
  @PrimaryColumn({ type: 'uuid' })
  id: string;

  @Column({ name: 'user_id', type: 'uuid' })
  userId: string;

  @ManyToOne(() => User, { onDelete: 'CASCADE' })
  @JoinColumn({ name: 'user_id' })
  user: Relation<User>;

  @Column({ type: 'text' })
  tool: string;

  @Column({ name: 'generation_type', type: 'text' })
  generationType: string;

  @Column({ type: 'text', default: 'pending' })
  status: JobStatus;

  @Column({ type: 'jsonb' })
  inputs: Record<string, StoredInput>;

  @Column({ type: 'jsonb', default: () => `'{}'` })
  texts: Record<string, string>;

  @Column({ type: 'boolean', nullable: true })
  like: boolean | null;

  @Column({ name: 'error_code', type: 'text', nullable: true })
  errorCode: JobErrorCode | null;

  @Column({ name: 'error_message', type: 'text', nullable: true })
  errorMessage: string | null;

  @Column({ name: 'created_at', type: 'timestamptz', default: () => 'now()' })
  createdAt: Date;

  @Column({ name: 'updated_at', type: 'timestamptz', default: () => 'now()' })
  updatedAt: Date;

  @Column({ name: 'completed_at', type: 'timestamptz', nullable: true })
  completedAt: Date | null;

  /** When a worker began running the job (it got its engine's slot); null while queued. */
  @Column({ name: 'started_at', type: 'timestamptz', nullable: true })
  startedAt: Date | null;

  /** Where the final state is POSTed (`webhook_url` at creation); null without a webhook. */
  @Column({ name: 'webhook_url', type: 'text', nullable: true })
  webhookUrl: string | null;

  @Column({ name: 'webhook_state', type: 'text', nullable: true })
  webhookState: WebhookState | null;

  @Column({ name: 'webhook_attempts', type: 'int', default: 0 })
  webhookAttempts: number;

  @Column({ name: 'webhook_last_attempt_at', type: 'timestamptz', nullable: true })
  webhookLastAttemptAt: Date | null;

  @Column({ name: 'webhook_last_status', type: 'int', nullable: true })
  webhookLastStatus: number | null;

  /** The messages the webhook's receiver asked for (`webhook_events`); null: the final state alone. */
  @Column({ name: 'webhook_events', type: 'text', array: true, nullable: true })
  webhookEvents: WebhookEventName[] | null;
  /** The seed asked for at creation; null: drawn from the id when the route takes one. Read as a number. */
  @Column({ type: 'bigint', nullable: true })
  seed: number | null;

  /** How many results the job makes (`num_outputs`). */
  @Column({ name: 'num_outputs', type: 'smallint', default: 1 })
  numOutputs: number;

  /** Each result's seed (null where the model takes none), one per result: null until complete. */
  @Column({ name: 'output_seeds', type: 'jsonb', nullable: true })
  outputSeeds: (number | null)[] | null;
}
