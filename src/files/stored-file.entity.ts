import { Check, Column, Entity, Index, JoinColumn, ManyToOne, PrimaryColumn, type Relation } from 'typeorm';
import { User } from '../auth/user.entity.js';
import type { ImageFormat } from '../common/image-format.js';

/**
 * An image a user stored with `POST /files`, to be named in jobs until `expires_at`. Its bytes are in the input store
 * under `key`; a job that names it copies them, so a file's removal never reaches a job. The sweep walks `expires_at`.
 */
@Entity({ name: 'files' })
@Check('files_format_check', `"format" IN ('jpeg', 'png', 'webp')`)
@Index('files_expires_at_idx', ['expiresAt'])
export class StoredFile {
  /** `file_` and a random part: the id clients put in a job's inputs. */
  @PrimaryColumn({ type: 'text' })
  id: string;

  @Index('files_user_id_idx')
  @Column({ name: 'user_id', type: 'uuid' })
  userId: string;

  @ManyToOne(() => User, { onDelete: 'CASCADE' })
  @JoinColumn({ name: 'user_id' })
  user: Relation<User>;

  /** Where the bytes are in the input store. */
  @Column({ type: 'text' })
  key: string;

  @Column({ type: 'text' })
  format: ImageFormat;

  @Column({ type: 'integer' })
  width: number;

  @Column({ type: 'integer' })
  height: number;

  @Column({ type: 'integer' })
  bytes: number;

  @Column({ name: 'created_at', type: 'timestamptz', default: () => 'now()' })
  createdAt: Date;

  @Column({ name: 'expires_at', type: 'timestamptz' })
  expiresAt: Date;
}
