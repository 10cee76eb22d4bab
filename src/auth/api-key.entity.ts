import { Column, Entity, Index, JoinColumn, ManyToOne, PrimaryColumn, type Relation } from 'typeorm';
import { User } from './user.entity.js';

/** Only the key's SHA-256 is stored; the key itself is shown once, at creation. */
@Entity({ name: 'api_keys' })
export class ApiKey {
  @PrimaryColumn({ type: 'uuid' })
  id: string;

  @Column({ name: 'user_id', type: 'uuid' })
  userId: string;

  @ManyToOne(() => User, { onDelete: 'CASCADE' })
  @JoinColumn({ name: 'user_id' })
  user: Relation<User>;

  /** The first characters of the key: not secret, enough to find the row and to name the key in listings. */
  @Index('api_keys_prefix_key', { unique: true })
  @Column({ type: 'text' })
  prefix: string;

  @Column({ name: 'key_hash', type: 'bytea' })
  keyHash: Buffer;

  @Column({ name: 'created_at', type: 'timestamptz', default: () => 'now()' })
  createdAt: Date;

  @Column({ name: 'revoked_at', type: 'timestamptz', nullable: true })
  revokedAt: Date | null;

  /** Opens the admin pages (the queue board) too; otherwise a key like any other. */
  @Column({ type: 'boolean', default: false })
  admin: boolean;
}
