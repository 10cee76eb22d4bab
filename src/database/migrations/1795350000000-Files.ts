import type { MigrationInterface, QueryRunner } from 'typeorm';

/** Users' stored files (`POST /files`): named in jobs until `expires_at`, removed with their user. */
export class Files1795350000000 implements MigrationInterface {
  name = 'Files1795350000000';

  async up(db: QueryRunner): Promise<void> {
    await db.query(`
      CREATE TABLE "files" (
        "id" text NOT NULL,
        "user_id" uuid NOT NULL,
        "key" text NOT NULL,
        "format" text NOT NULL,
        "width" integer NOT NULL,
        "height" integer NOT NULL,
        "bytes" integer NOT NULL,
        "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        "expires_at" TIMESTAMP WITH TIME ZONE NOT NULL,
        CONSTRAINT "files_format_check" CHECK ("format" IN ('jpeg', 'png', 'webp')),
        CONSTRAINT "PK_files" PRIMARY KEY ("id")
      )`);
    await db.query(`CREATE INDEX "files_user_id_idx" ON "files" ("user_id")`);
    await db.query(`CREATE INDEX "files_expires_at_idx" ON "files" ("expires_at")`);
    await db.query(
      `ALTER TABLE "files" ADD CONSTRAINT "FK_a7435dbb7583938d5e7d1376041" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE`,
    );
  }

  async down(db: QueryRunner): Promise<void> {
    await db.query('DROP TABLE "files"');
  }
}
