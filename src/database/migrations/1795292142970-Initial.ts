import type { MigrationInterface, QueryRunner } from 'typeorm';

export class Initial1795292142970 implements MigrationInterface {
  name = 'Initial1795292142970';

  async up(db: QueryRunner): Promise<void> {
    await db.query(`
      CREATE TABLE "users" (
        "id" uuid NOT NULL,
        "name" text NOT NULL,
        "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        CONSTRAINT "UQ_51b8b26ac168fbe7d6f5653e6cf" UNIQUE ("name"),
        CONSTRAINT "PK_a3ffb1c0c8416b9fc6f907b7433" PRIMARY KEY ("id")
      )`);
    await db.query(`
      CREATE TABLE "api_keys" (
        "id" uuid NOT NULL,
        "user_id" uuid NOT NULL,
        "prefix" text NOT NULL,
        "key_hash" bytea NOT NULL,
        "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        "revoked_at" TIMESTAMP WITH TIME ZONE,
        CONSTRAINT "PK_5c8a79801b44bd27b79228e1dad" PRIMARY KEY ("id"),
        CONSTRAINT "FK_a3baee01d8408cd3c0f89a9a973" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE
      )`);
    await db.query(`CREATE UNIQUE INDEX "api_keys_prefix_key" ON "api_keys" ("prefix")`);
    await db.query(`
      CREATE TABLE "history_items" (
        "id" uuid NOT NULL,
        "user_id" uuid NOT NULL,
        "tool" text NOT NULL,
        "generation_type" text NOT NULL,
        "status" text NOT NULL DEFAULT 'pending',
        "inputs" jsonb NOT NULL,
        "texts" jsonb NOT NULL DEFAULT '{}',
        "like" boolean,
        "error_code" text,
        "error_message" text,
        "created_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        "updated_at" TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now(),
        "completed_at" TIMESTAMP WITH TIME ZONE,
        CONSTRAINT "history_items_status_check" CHECK ("status" IN ('pending', 'complete', 'error')),
        CONSTRAINT "history_items_error_check" CHECK (("status" = 'error') = ("error_code" IS NOT NULL)),
        CONSTRAINT "PK_history_items" PRIMARY KEY ("id"),
        CONSTRAINT "FK_a5b4984e62f3f8b031fc625cf0c" FOREIGN KEY ("user_id") REFERENCES "users"("id") ON DELETE CASCADE
      )`);
    await db.query(`CREATE INDEX "history_items_user_created" ON "history_items" ("user_id", "created_at", "id")`);
    await db.query(
      `CREATE INDEX "history_items_user_status_created" ON "history_items" ("user_id", "status", "created_at", "id")`,
    );
    await db.query(
      `CREATE INDEX "history_items_user_type_created" ON "history_items" ("user_id", "generation_type", "created_at", "id")`,
    );
    await db.query(
      `CREATE INDEX "history_items_user_status_type_created" ON "history_items" ("user_id", "status", "generation_type", "created_at", "id")`,
    );
    await db.query(
      `CREATE INDEX "history_items_pending_created" ON "history_items" ("created_at") WHERE "status" = 'pending'`,
    );
  }

  async down(db: QueryRunner): Promise<void> {
    await db.query(`DROP TABLE "history_items"`);
    await db.query(`DROP TABLE "api_keys"`);
    await db.query(`DROP TABLE "users"`);
  }
}
