import { Column, Entity, JoinColumn, ManyToOne, PrimaryColumn, type Relation } from 'typeorm';
import { User } from '../auth/user.entity.js';
import type { JobStatus } from './history-item.entity.js';

/**
 * How many history items a user has per status and generation type, kept exact by a trigger on
 * `history_items` (see the migration). A history page's `total` sums at most a few dozen of these rows
 * instead of counting a user's whole history on every request.
 */
@Entity({ name: 'history_counts' })
export class HistoryCount {
  @PrimaryColumn({ name: 'user_id', type: 'uuid' })
  userId: string;

  @ManyToOne(() => User, { onDelete: 'CASCADE' })
  @JoinColumn({ name: 'user_id' })
  user: Relation<User>;

  @PrimaryColumn({ type: 'text' })
  status: JobStatus;

  @PrimaryColumn({ name: 'generation_type', type: 'text' })
  generationType: string;

  @Column({ type: 'bigint' })
  count: string;
}
