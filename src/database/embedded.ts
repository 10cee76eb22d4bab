import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { connect } from 'node:net';
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';

/**
 * PostgreSQL in the service's own process: PGlite served over the wire protocol on loopback, so the
 * same `pg` driver, TypeORM and migrations run unchanged. For trying the service, not for production.
 */
export class EmbeddedDatabase {
  private constructor(
    readonly url: string,
    /** True when this start created the data directory, i.e. the database is brand new. */
    readonly createdNow: boolean,
    private readonly stopServer: () => Promise<void>,
  ) {}

  /** Connections PGlite serves at once; it runs one query at a time, so more buys nothing. */
  static readonly MAX_CONNECTIONS = 4;

  /**
   * Opens the data directory, or joins the embedded database another local process (a running service,
   * say, when the API key CLI is used beside it) already serves on `port`: PGlite must have one owner.
   */
  static async start(dataDir: string, port: number): Promise<EmbeddedDatabase> {
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    if (await isListening(port)) return new EmbeddedDatabase(url, false, async () => {});
    const createdNow = !existsSync(dataDir);
    await mkdir(dataDir, { recursive: true });
    const db = await PGlite.create(dataDir);
    const server = new PGLiteSocketServer({
      db,
      host: '127.0.0.1',
      port,
      maxConnections: EmbeddedDatabase.MAX_CONNECTIONS,
    });
    await server.start();
    return new EmbeddedDatabase(url, createdNow, async () => {
      await server.stop();
      await db.close();
    });
  }

  stop(): Promise<void> {
    return this.stopServer();
  }
}

function isListening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}
