import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppConfig } from './config.js';
import { LiveRouting, type RoutingInUse } from './live-routing.js';

const RETITLED = (title: string) => `tools:\n  fabric: { title: ${title} }\n`;

function routingFile(yaml: string): string {
  const path = join(mkdtempSync(join(tmpdir(), 'live-routing-')), 'engines.yaml');
  writeFileSync(path, yaml);
  return path;
}

describe('LiveRouting', () => {
  it('puts a changed file in use, tells its listeners, and names it by what was read', () => {
    const path = routingFile(RETITLED('Upholstery'));
    const sut = new LiveRouting(new AppConfig({ ENGINES_FILE: path }));
    const first = sut.current.generation;
    const seen: RoutingInUse[] = [];
    sut.onChange((routing) => seen.push(routing));

    writeFileSync(path, RETITLED('Cushions'));
    const taken = sut.reload('a test');

    expect(taken).toBe(true);
    expect(sut.current.catalog.findTool('fabric')?.title).toBe('Cushions');
    expect(seen).toEqual([sut.current]);
    expect(sut.current.generation).not.toBe(first);
    // Another process reading the same file names it alike.
    expect(new LiveRouting(new AppConfig({ ENGINES_FILE: path })).current.generation).toBe(sut.current.generation);
  });

  it('keeps the last good file when the new one fails its checks, and counts the failure', () => {
    const path = routingFile(RETITLED('Upholstery'));
    const sut = new LiveRouting(new AppConfig({ ENGINES_FILE: path }));
    const before = sut.current;
    const seen: RoutingInUse[] = [];
    sut.onChange((routing) => seen.push(routing));

    writeFileSync(path, 'tools:\n  fabric: { title: Cushions, colour: red }\n');

    expect(sut.reload('a test')).toBe(false);
    expect(sut.current).toBe(before);
    expect(sut.reloadFailures).toBe(1);
    expect(seen).toEqual([]);
  });

  it('changes nothing, and tells nobody, when the file read is the one in use', () => {
    const path = routingFile(RETITLED('Upholstery'));
    const sut = new LiveRouting(new AppConfig({ ENGINES_FILE: path }));
    const before = sut.current;
    const seen: RoutingInUse[] = [];
    sut.onChange((routing) => seen.push(routing));

    expect(sut.reload('a test')).toBe(true);
    expect(sut.current).toBe(before);
    expect(seen).toEqual([]);
  });

  it('names the built-in catalog generation 0 when there is no routing file', () => {
    const sut = new LiveRouting(new AppConfig({}));

    expect(sut.current.generation).toBe(0);
    expect(sut.reload('a test')).toBe(true);
    expect(sut.current.generation).toBe(0);
  });
});
