/**
 * Baseline for the `history` bench's item read: a bare node:http server with a pg Pool (10 connections,
 * like the service's default DB_POOL_SIZE) running the same lookup by id and user, answering the same JSON
 * shape. No framework, no auth (the user id is fixed), no ORM.
 *
 * Env: PORT, HOST (127.0.0.1), DATABASE_URL, USER_ID, PUBLIC_BASE_URL.
 */
import http from 'node:http';
import pg from 'pg';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 });
const userId = process.env.USER_ID;
const base = process.env.PUBLIC_BASE_URL ?? `http://localhost:${process.env.PORT}`;
const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const SQL = `SELECT id, user_id, tool, generation_type, status, inputs, texts, "like", error_code, error_message,
                    created_at, updated_at, completed_at
               FROM history_items WHERE id = $1 AND user_id = $2`;

function dto(row) {
  const complete = row.status === 'complete';
  const stock = `media/${row.id}/stock.jpg`;
  return {
    history_item_id: row.id,
    tool: row.tool,
    generation_type: row.generation_type,
    status: row.status,
    preview_url: complete ? `media/${row.id}/preview.webp` : null,
    stock_url: complete ? stock : null,
    output_url: complete ? `${base}/${stock}` : null,
    like: row.like,
    error: row.error_code ? { code: row.error_code, message: row.error_message ?? '' } : null,
    created_at: row.created_at.toISOString(),
    updated_at: row.updated_at.toISOString(),
    completed_at: row.completed_at?.toISOString() ?? null,
  };
}

const PREFIX = '/user/generation-history/';
const server = http.createServer(async (req, res) => {
  if (req.url === '/ready') {
    await pool.query('SELECT 1');
    res.writeHead(200, { 'Content-Type': 'application/json' }).end('{"ready":true}');
    return;
  }
  const id = req.url.startsWith(PREFIX) ? req.url.slice(PREFIX.length) : '';
  if (req.method !== 'GET' || !UUID.test(id)) {
    res.writeHead(404).end();
    return;
  }
  try {
    const { rows } = await pool.query(SQL, [id.toLowerCase(), userId]);
    if (rows.length === 0) {
      res.writeHead(404, { 'Content-Type': 'application/json' }).end('{"code":"not_found"}');
      return;
    }
    res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(dto(rows[0])));
  } catch (error) {
    res.writeHead(500, { 'Content-Type': 'application/json' }).end(JSON.stringify({ error: String(error?.message) }));
  }
});
server.keepAliveTimeout = 65_000;
process.on('SIGTERM', () => server.closeAllConnections());
server.listen(Number(process.env.PORT), process.env.HOST ?? '127.0.0.1');
process.on('SIGTERM', () => server.close(() => pool.end().then(() => process.exit(0))));
