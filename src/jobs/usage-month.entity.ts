import { Column, Entity, JoinColumn, ManyToOne, PrimaryColumn, type Relation } from 'typeorm';
import { User } from '../auth/user.entity.js';

/**
 * A user's jobs created in one calendar month (UTC) with one tool, and how many of them ended complete or in error,
 * kept by a trigger on `history_items` (see the JobView migration): deleting an item does not take it off. `GET
 * /user/usage` reads the month's few rows instead of counting the user's items.
 */
@Entity({ name: 'usage_months' })
export class UsageMonth {
  @PrimaryColumn({ name: 'user_id', type: 'uuid', primaryKeyConstraintName: 'PK_usage_months' })
  userId: string;

  @ManyToOne(() => User, { onDelete: 'CASCADE' })
  @JoinColumn({ name: 'user_id', foreignKeyConstraintName: 'FK_usage_months_user' })
  user: Relation<User>;

  @PrimaryColumn({ name: 'period_start', type: 'date', primaryKeyConstraintName: 'PK_usage_months' })
  periodStart: string;

  @PrimaryColumn({ type: 'text', primaryKeyConstraintName: 'PK_usage_months' })
  tool: string;

  @Column({ type: 'bigint', default: 0 })
  jobs: string;

  @Column({ type: 'bigint', default: 0 })
  complete: string;

  @Column({ type: 'bigint', default: 0 })
  error: string;
}
