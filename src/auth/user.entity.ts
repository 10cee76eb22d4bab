import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity({ name: 'users' })
export class User {
  @PrimaryColumn({ type: 'uuid' })
  id: string;

  @Column({ type: 'text', unique: true })
  name: string;

  @Column({ name: 'created_at', type: 'timestamptz', default: () => 'now()' })
  createdAt: Date;

  /** The user's own pending-job limit (`igs limits set`); null: `LIMIT_MAX_PENDING`. */
  @Column({ name: 'max_pending', type: 'integer', nullable: true })
  maxPending: number | null;

  /** The user's own creations-per-minute limit; null: `LIMIT_CREATIONS_PER_MINUTE`. */
  @Column({ name: 'creations_per_minute', type: 'integer', nullable: true })
  creationsPerMinute: number | null;

  /** The user's own uploads in progress at once; null: `LIMIT_CONCURRENT_UPLOADS`. */
  @Column({ name: 'concurrent_uploads', type: 'integer', nullable: true })
  concurrentUploads: number | null;

  /** The user's own open event streams at once; null: `LIMIT_EVENT_STREAMS`. */
  @Column({ name: 'event_streams', type: 'integer', nullable: true })
  eventStreams: number | null;

  /** The user's own `Prefer: wait` requests held at once; null: `LIMIT_HELD_REQUESTS`. */
  @Column({ name: 'held_requests', type: 'integer', nullable: true })
  heldRequests: number | null;
}
