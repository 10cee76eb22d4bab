import { Column, Entity, JoinColumn, OneToOne, PrimaryColumn, type Relation } from 'typeorm';
import { User } from '../auth/user.entity.js';

/**
 * A user's webhook signing secret. After a rotation the previous one keeps signing until `previous_until`, so
 * receivers can switch over without rejecting a delivery.
 */
@Entity({ name: 'webhook_secrets' })
export class WebhookSecret {
  @PrimaryColumn({ name: 'user_id', type: 'uuid' })
  userId: string;

  @OneToOne(() => User, { onDelete: 'CASCADE' })
  @JoinColumn({ name: 'user_id' })
  user: Relation<User>;

  @Column({ type: 'text' })
  secret: string;

  @Column({ name: 'previous_secret', type: 'text', nullable: true })
  previousSecret: string | null;

  @Column({ name: 'previous_until', type: 'timestamptz', nullable: true })
  previousUntil: Date | null;

  @Column({ name: 'rotated_at', type: 'timestamptz', default: () => 'now()' })
  rotatedAt: Date;
}
