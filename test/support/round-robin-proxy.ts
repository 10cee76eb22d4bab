import { once } from 'node:events';
import { type Server, type Socket, connect, createServer } from 'node:net';

/**
 * A load balancer in front of API replicas, at the TCP level: each new connection goes to the next upstream in turn,
 * and to the one after it when that one refuses (a replica not started yet, or gone), as nginx's
 * `proxy_next_upstream error` or a Kubernetes Service does. A connection stays with its upstream until either side
 * closes it, so keep-alive requests follow their connection, as they do behind a real one.
 */
export interface RoundRobinProxy {
  baseUrl: string;
  /** The upstream ports, in turn; add one to put a replica behind the balancer. */
  upstreams: number[];
  /** Every connection passed on so far, by the upstream port it reached, in order. */
  connections: { upstream: number; open: boolean }[];
  close(): Promise<void>;
}

export async function startRoundRobinProxy(upstreams: number[]): Promise<RoundRobinProxy> {
  let next = 0;
  const sockets = new Set<Socket>();
  const connections: RoundRobinProxy['connections'] = [];

  const reach = (tries: number): Promise<{ socket: Socket; port: number }> => {
    const port = upstreams[next++ % upstreams.length];
    return new Promise((resolve, reject) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => resolve({ socket, port }));
      socket.once('error', (error) => (tries > 1 ? resolve(reach(tries - 1)) : reject(error)));
    });
  };

  const server: Server = createServer((client) => {
    sockets.add(client);
    client.pause();
    client.on('error', () => client.destroy());
    client.once('close', () => sockets.delete(client));
    reach(upstreams.length).then(
      ({ socket: upstream, port }) => {
        const connection = { upstream: port, open: true };
        connections.push(connection);
        sockets.add(upstream);
        upstream.removeAllListeners('error');
        upstream.on('error', () => upstream.destroy());
        // Either side's end is passed on to the other, so a replica closing its connection closes the client's.
        upstream.once('close', () => {
          connection.open = false;
          sockets.delete(upstream);
          client.destroy();
        });
        client.once('close', () => upstream.destroy());
        client.pipe(upstream);
        upstream.pipe(client);
        client.resume();
      },
      () => client.destroy(),
    );
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    upstreams,
    connections,
    async close() {
      for (const socket of sockets) socket.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}
