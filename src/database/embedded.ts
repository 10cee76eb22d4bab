import { randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { Mutex } from 'async-mutex';
import { keptSecret } from '../common/kept-secret.js';

/**
 * PostgreSQL in the service's own process: PGlite served over the wire protocol on loopback, so the
 * same `pg` driver, TypeORM and migrations run unchanged. For trying the service, not for production.
 * Other users of the machine are kept out: the data directory is the owner's alone, and a connection must give the
 * password kept in it (PASSWORD_FILE), which a local process of the same user (the `igs` command) reads to join.
 *
 * PGlite is one PostgreSQL session, whatever number of sockets reach it. A server that passes each
 * protocol message on as it arrives (pglite-socket does) interleaves the connections' exchanges: one
 * connection's Bind lands on the statement another connection's Parse just replaced, and a named
 * statement one connection prepared already exists for the next. So this server runs a connection's
 * messages up to its Sync (or a simple Query) as one unit, and while that connection has a transaction
 * open, no other connection's statements run. Callers must still not name prepared statements:
 * their names are shared by all connections (see `Database`).
 */
export class EmbeddedDatabase {
  private constructor(
    readonly url: string,
    /** True when this start created the data directory, i.e. the database is brand new. */
    readonly createdNow: boolean,
    private readonly stopServer: () => Promise<void>,
  ) {}

  /**
   * Opens the data directory, or joins the embedded database another local process (a running service,
   * say, when the API key CLI is used beside it) already serves on `port`: PGlite must have one owner.
   */
  static async start(dataDir: string, port: number): Promise<EmbeddedDatabase> {
    const passwordFile = join(dataDir, PASSWORD_FILE);
    const urlWith = (password: string) => `postgres://postgres:${password}@127.0.0.1:${port}/postgres`;
    if (await isListening(port)) {
      return new EmbeddedDatabase(urlWith((await readFile(passwordFile, 'utf8')).trim()), false, async () => {});
    }
    const createdNow = !existsSync(dataDir);
    await mkdir(dataDir, { recursive: true, mode: 0o700 });
    // PGlite writes its files readable and writable by everyone: the directory is what keeps others out.
    await chmod(dataDir, 0o700);
    const db = await PGlite.create(dataDir);
    const password = await passwordOf(passwordFile);
    const server = await serve(db, port, password);
    const url = urlWith(password);
    return new EmbeddedDatabase(url, createdNow, async () => {
      await server.close();
      await db.close();
    });
  }

  stop(): Promise<void> {
    return this.stopServer();
  }
}

/** In the data directory: the password connections give, made on the first start. */
const PASSWORD_FILE = 'igs-wire-password';
/** What the password file holds; anything else (an empty file a crash left) is made anew. */
const PASSWORD = /^[0-9a-f]{48}$/;

function passwordOf(file: string): Promise<string> {
  return keptSecret(file, PASSWORD, () => randomBytes(24).toString('hex'));
}

/** Request codes a client may send in place of a startup message (PostgreSQL's protocol, "Message Formats"). */
const SSL_REQUEST = 80877103;
const GSSENC_REQUEST = 80877104;
const CANCEL_REQUEST = 80877102;

/** Front-end messages after which the backend answers ReadyForQuery: the end of one exchange. */
const SYNC = 0x53; // 'S'
const QUERY = 0x51; // 'Q'
/** Asks for the answers so far without ending the exchange (cursors): the session stays held. */
const FLUSH = 0x48; // 'H'
const TERMINATE = 0x58; // 'X'
const PASSWORD_MESSAGE = 0x70; // 'p'
/** Far above what a startup or password message holds (PostgreSQL itself refuses a startup packet over 10,000 bytes). */
const STARTUP_MAX_BYTES = 10_000;
/** AuthenticationCleartextPassword: the password in plain text, which on loopback nobody else sees. */
const ASK_PASSWORD = Uint8Array.of(0x52, 0, 0, 0, 8, 0, 0, 0, 3);
const SYNC_MESSAGE = Uint8Array.of(SYNC, 0, 0, 0, 4);

async function serve(db: PGlite, port: number, password: string): Promise<{ close(): Promise<void> }> {
  const session = new Mutex();
  const connections = new Set<WireConnection>();
  const server: Server = createServer((socket) => {
    const connection = new WireConnection(db, session, socket, password);
    connections.add(connection);
    socket.once('close', () => connections.delete(connection));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return {
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const connection of connections) connection.destroy();
      await closed;
      // Lets a statement already running finish before the database is closed under it.
      await session.waitForUnlock();
    },
  };
}

/** One client socket: frames its messages and runs them an exchange at a time on the shared session. */
class WireConnection {
  private buffer: Buffer = Buffer.alloc(0);
  /** The client's startup message, kept until its password is checked; PGlite then answers it. */
  private startup: Buffer | undefined;
  private started = false;
  /** Messages of the exchange in progress, not yet run. */
  private exchange: Buffer[] = [];
  /** This connection's exchanges run one after the other, in the order they arrived. */
  private work = Promise.resolve();
  private releaseSession?: () => void;
  private closed = false;
  /** Nothing more is read: the client broke the protocol or gave a wrong password. */
  private refused = false;

  constructor(
    private readonly db: PGlite,
    private readonly session: Mutex,
    private readonly socket: Socket,
    private readonly password: string,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (chunk) => this.receive(chunk));
    socket.on('error', () => socket.destroy());
    socket.once('close', () => {
      this.closed = true;
      this.exchange = [];
      this.work = this.work.then(() => this.abandonSession());
    });
  }

  destroy(): void {
    this.socket.destroy();
  }

  private receive(chunk: Buffer): void {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    while (!this.refused) {
      const message = this.started || this.startup ? this.nextTypedMessage() : this.nextStartupMessage();
      if (!message) return;
      if (this.started) this.onMessage(message);
      else if (this.startup) this.onPassword(message);
      else this.onStartupMessage(message);
    }
  }

  /** Before startup, a message is its length (4 bytes, itself included) and a body whose first 4 bytes say what it is. */
  private nextStartupMessage(): Buffer | undefined {
    if (this.buffer.length < 8) return undefined;
    const length = this.buffer.readInt32BE(0);
    if (length < 8 || length > STARTUP_MAX_BYTES) return this.refuse();
    if (this.buffer.length < length) return undefined;
    return this.take(length);
  }

  /** After startup, a message is a type byte and a length (4 bytes, itself included, the type byte not). */
  private nextTypedMessage(): Buffer | undefined {
    if (this.buffer.length < 5) return undefined;
    const declared = this.buffer.readInt32BE(1);
    if (declared < 4 || (!this.started && declared > STARTUP_MAX_BYTES)) return this.refuse();
    const length = 1 + declared;
    if (this.buffer.length < length) return undefined;
    return this.take(length);
  }

  /** Ends a connection that broke the protocol (a length that cannot be) or gave a wrong password. */
  private refuse(answer?: Buffer): undefined {
    this.refused = true;
    this.buffer = Buffer.alloc(0);
    if (answer) this.socket.end(answer);
    else this.socket.destroy();
    return undefined;
  }

  private take(length: number): Buffer {
    const message = this.buffer.subarray(0, length);
    this.buffer = this.buffer.subarray(length);
    return message;
  }

  private onStartupMessage(message: Buffer): void {
    const code = message.readInt32BE(4);
    if (code === SSL_REQUEST || code === GSSENC_REQUEST) {
      this.socket.write('N'); // no encryption on loopback; the client goes on in plain text
    } else if (code === CANCEL_REQUEST) {
      this.socket.destroy(); // not supported: statements here are short and run whole
    } else {
      this.startup = Buffer.from(message);
      this.socket.write(ASK_PASSWORD);
    }
  }

  private onPassword(message: Buffer): void {
    // The message is 'p', its length, and the password ending in a zero byte.
    const given = message.subarray(5, message.length - 1);
    const expected = Buffer.from(this.password);
    if (message[0] !== PASSWORD_MESSAGE || given.length !== expected.length || !timingSafeEqual(given, expected)) {
      this.refuse(passwordRefused());
      return;
    }
    this.started = true;
    this.run([this.startup!], true);
  }

  private onMessage(message: Buffer): void {
    const type = message[0];
    if (type === TERMINATE) {
      this.socket.end();
      return;
    }
    this.exchange.push(message);
    if (type === SYNC || type === QUERY || type === FLUSH) {
      const exchange = this.exchange;
      this.exchange = [];
      this.run(exchange, type !== FLUSH);
    }
  }

  /** Runs messages on the shared session, holding it from an exchange's first message to its end. */
  private run(messages: Buffer[], endsExchange: boolean): void {
    this.work = this.work.then(async () => {
      if (this.closed) return;
      this.releaseSession ??= await this.session.acquire();
      await this.db.runExclusive(() =>
        this.db.execProtocolRawStream(Buffer.concat(messages), {
          onRawData: (data) => {
            if (!this.closed) this.socket.write(data);
          },
        }),
      );
      // An open transaction keeps the session: another connection's statements would otherwise run inside it.
      if (endsExchange && !this.db.isInTransaction()) this.leaveSession();
    });
    this.work = this.work.catch(() => {
      this.socket.destroy();
    });
  }

  /** A client gone mid-exchange or mid-transaction leaves the session as a new one would find it. */
  private async abandonSession(): Promise<void> {
    if (!this.releaseSession) return;
    try {
      await this.db.runExclusive(() => this.db.execProtocolRaw(SYNC_MESSAGE));
      if (this.db.isInTransaction()) await this.db.exec('ROLLBACK');
    } finally {
      this.leaveSession();
    }
  }

  private leaveSession(): void {
    this.releaseSession?.();
    this.releaseSession = undefined;
  }
}

/** ErrorResponse: FATAL, invalid_password (28P01), as PostgreSQL refuses a wrong password. */
function passwordRefused(): Buffer {
  const fields = ['SFATAL', 'VFATAL', 'C28P01', 'Mpassword authentication failed for user "postgres"'];
  const body = Buffer.from(`${fields.join('\0')}\0\0`, 'utf8');
  const head = Buffer.alloc(5);
  head[0] = 0x45; // 'E'
  head.writeInt32BE(4 + body.length, 1);
  return Buffer.concat([head, body]);
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
