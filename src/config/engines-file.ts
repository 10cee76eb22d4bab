import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Ajv } from 'ajv';
import { parseDocument } from 'yaml';
import {
  BUILT_IN,
  type Catalog,
  type CatalogGenerationType,
  type CatalogInput,
  type CatalogTool,
} from '../catalog/catalog.js';
import { parseDuration } from './duration.js';
import { describeError, errorPath } from './schema-errors.js';
import { readToolsSection } from './tools-section.js';
import type { EngineServerSetting, RemoteEngineKind, RouteBase, RouteSetting, ServerBase } from './engine-settings.js';

const DEFAULT_CONCURRENCY = 1;
/** `${VAR}`: read from the environment in an engine's settings. */
const VARIABLE = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;
/** `$VAR` as a word of its own: a variable written without its braces. */
const BARE_VARIABLE = /(?<=^|\s)\$([A-Za-z_][A-Za-z0-9_]*)(?=\s|$)/g;
const DEFAULT_TIMEOUT = '5m';

const DURATION = {
  type: 'string',
  pattern: '^0*[1-9]\\d*(ms|s|m|h|d)$',
  description: 'a duration above zero, such as 30s, 10m or 2h',
};
const STRING_MAP = { type: 'object', additionalProperties: { type: 'string' } };
const SERVER_COMMON = {
  kind: { type: 'string' },
  concurrency: { type: 'integer', minimum: 1, maximum: 1000 },
  timeout: DURATION,
  headers: STRING_MAP,
};
const ROUTE_COMMON = { engine: { type: 'string' }, describe: STRING_MAP };

/**
 * The file's shape; the keys of each kind's servers and routes are the kind's own (`EngineKind`, in
 * src/engines/<kind>/). The references between them are checked in code.
 */
const FILE = {
  type: 'object',
  additionalProperties: false,
  properties: {
    engines: { type: 'object', additionalProperties: { type: 'object', required: ['kind'] } },
    routes: { type: 'object', additionalProperties: { type: 'object', required: ['engine'] } },
    tools: { type: 'object', additionalProperties: { type: 'object' } },
  },
  // Compose's convention for settings shared through anchors (`x-gpu: &gpu`): read by nothing but the YAML merge.
  patternProperties: { '^x-': {} },
};

export type Json = Record<string, unknown>;
type Validator = ReturnType<typeof ajv.compile>;

const ajv = new Ajv({ allErrors: true, verbose: true, strict: false });
const validateFile = ajv.compile(FILE);
/** Each kind's server or route schema: the keys every one has and the kind's own, compiled once per kind. */
const kindValidators = new WeakMap<object, Validator>();

/** What the file's reader gives a kind's checks of one route. */
export interface RouteCheckContext {
  /** The route's key path, such as `routes.fashion_swap`. */
  at: string;
  /** The inputs of the tool the route serves. */
  inputs: readonly CatalogInput[];
  /** Reports a problem; its message starts with its key path. */
  problem: (message: string) => void;
  /** A path written in the file (a workflow), read relative to the file's folder. */
  resolve: (file: string) => string;
}

/** What the file's reader gives a kind's checks of one server. */
export interface ServerCheckContext {
  /** The server's key path, such as `engines.comfy`. */
  at: string;
  /** An absolute http(s) URL without credentials (a problem at `at` otherwise), kept without its trailing slash. */
  url: (at: string, value: string) => string;
  /** Reports a problem; its message starts with its key path. */
  problem: (message: string) => void;
}

/** A kind's keys beside the common ones: those it requires, and the JSON Schema of each. */
interface KindKeys {
  required: readonly string[];
  properties: Readonly<Record<string, unknown>>;
}

/**
 * One kind of model server, as the routing file names it: the keys its servers and its routes take beside the common
 * ones (`kind`, `concurrency`, `timeout`, `headers`; `engine`, `describe`), and the checks of what those say.
 */
export interface EngineKind<
  Server extends EngineServerSetting = EngineServerSetting,
  Route extends RouteSetting = RouteSetting,
> {
  server: KindKeys & {
    /** The server from one that matched the schema, its `${VAR}`s read. */
    build(raw: Json, common: ServerBase, context: ServerCheckContext): Server;
  };
  route: KindKeys & {
    /** The route from one that matched the schema; undefined when it cannot be used (its problems reported). */
    build(raw: Json, base: RouteBase, context: RouteCheckContext): Route | undefined;
  };
}

export type EngineKinds = {
  [Kind in RemoteEngineKind]: EngineKind<
    Extract<EngineServerSetting, { kind: Kind }>,
    Extract<RouteSetting, { kind: Kind }>
  >;
};

export interface EnginesFile {
  /** The built-in tools with the file's `tools:` section applied. */
  catalog: Catalog;
  servers: EngineServerSetting[];
  routes: RouteSetting[];
}

/**
 * Reads and checks the routing file (`ENGINES_FILE`, see docs/engines.md). Every problem is reported, each naming its
 * key path (`routes.fashion_swap.inputs.person.node: ...`); `problems` is empty when the file is good.
 */
export function readEnginesFile(
  path: string,
  env: NodeJS.ProcessEnv,
  kinds: EngineKinds,
): { file: EnginesFile; problems: string[] } {
  return new EnginesFileReader(resolve(path), env, kinds).read();
}

class EnginesFileReader {
  private readonly problems: string[] = [];
  private readonly servers = new Map<string, EngineServerSetting>();
  /**
   * Every engine the file names, with its kind when that is known: a route to an engine refused for a problem of its
   * own is still checked against its kind, so that one run shows every problem.
   */
  private readonly engineKinds = new Map<string, EngineServerSetting['kind'] | undefined>();
  private readonly routes: RouteSetting[] = [];
  private catalog: Catalog = BUILT_IN;

  constructor(
    private readonly path: string,
    private readonly env: NodeJS.ProcessEnv,
    private readonly kinds: EngineKinds,
  ) {}

  read(): { file: EnginesFile; problems: string[] } {
    const root = this.parse();
    if (root && this.checkFile(root)) {
      const { catalog, problems } = readToolsSection(root.tools as Json | undefined);
      this.catalog = catalog;
      this.problems.push(...problems);
      for (const [name, server] of Object.entries((root.engines ?? {}) as Record<string, Json>)) {
        this.server(name, server);
      }
      for (const [key, route] of Object.entries((root.routes ?? {}) as Record<string, Json>)) this.route(key, route);
      this.checkConfiguredToolsRouted(root.routes as Json | undefined);
    }
    const problems = this.problems.map((problem) => `ENGINES_FILE ${this.path}: ${problem}`);
    return { file: { catalog: this.catalog, servers: [...this.servers.values()], routes: this.routes }, problems };
  }

  /**
   * Each generation type of a configured tool has a route (its own or its tool's), written if not usable: the local
   * engine runs only the built-in tools, so a type without one could be offered and never run.
   */
  private checkConfiguredToolsRouted(routes: Json | undefined): void {
    for (const tool of [...this.catalog.tools, ...this.catalog.withdrawn]) {
      if (!tool.configured || Object.hasOwn(routes ?? {}, tool.id)) continue;
      for (const type of tool.generationTypes) {
        if (!Object.hasOwn(routes ?? {}, `${tool.id}/${type.id}`)) {
          this.problems.push(
            `tools.${tool.id}.generation_types.${type.id}: a configured tool runs on a model server; add a route (routes.${tool.id} or routes.${tool.id}/${type.id})`,
          );
        }
      }
    }
  }

  private parse(): Json | undefined {
    let text: string;
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (error) {
      this.problems.push(`cannot be read (${(error as NodeJS.ErrnoException).code ?? String(error)})`);
      return undefined;
    }
    // Merge keys (`<<: *vton`) as operators write them in other deployment files; YAML 1.2 leaves them out.
    const document = parseDocument(text, { uniqueKeys: true, merge: true });
    if (document.errors.length > 0) {
      for (const error of document.errors) this.problems.push(`is not valid YAML: ${error.message.split('\n')[0]}`);
      return undefined;
    }
    const root: unknown = document.toJS();
    if (typeof root !== 'object' || root === null || Array.isArray(root)) {
      this.problems.push('must be a mapping with `engines` and `routes`');
      return undefined;
    }
    return root as Json;
  }

  private server(name: string, raw: Json): void {
    const at = `engines.${name}`;
    const kind = raw.kind as RemoteEngineKind;
    const kinds = Object.keys(this.kinds);
    if (!kinds.includes(kind)) {
      this.engineKinds.set(name, undefined);
      this.problems.push(`${at}.kind: must be one of ${kinds.join(', ')}, got ${JSON.stringify(raw.kind)}`);
      return;
    }
    this.engineKinds.set(name, kind);
    const unset = new Set<string>();
    const server = this.substitute(raw, at, unset);
    const { server: serverKind }: EngineKind = this.kinds[kind];
    if (!this.checkKind(serverKind, SERVER_COMMON, server, at, unset)) return;
    const common: ServerBase = {
      name,
      concurrency: (server.concurrency as number | undefined) ?? DEFAULT_CONCURRENCY,
      timeoutMs: parseDuration((server.timeout as string | undefined) ?? DEFAULT_TIMEOUT),
      headers: (server.headers ?? {}) as Record<string, string>,
    };
    this.servers.set(
      name,
      serverKind.build(server, common, {
        at,
        url: (where, value) => this.url(where, value, unset),
        problem: (message) => this.problems.push(message),
      }),
    );
  }

  private route(key: string, raw: Json): void {
    const at = `routes.${key}`;
    const [toolId, generationType, ...rest] = key.split('/');
    const tool = this.catalog.findTool(toolId) ?? this.catalog.withdrawn.find((withdrawn) => withdrawn.id === toolId);
    if (rest.length > 0) {
      this.problems.push(`${at}: routes are named "tool" or "tool/generation_type", with one slash at most`);
      return;
    }
    if (!tool) {
      const tools = [...this.catalog.tools, ...this.catalog.withdrawn].map((t) => t.id).join(', ');
      this.problems.push(
        `${at}: routes are named "tool" or "tool/generation_type"; there is no tool "${toolId}" (tools: ${tools})`,
      );
      return;
    }
    const type = tool.generationTypes.find((candidate) => candidate.id === generationType);
    if (generationType !== undefined && !type) {
      const types = tool.generationTypes.map((type) => type.id).join(', ');
      this.problems.push(`${at}: tool "${tool.id}" has no generation type "${generationType}" (types: ${types})`);
      return;
    }
    const engine = raw.engine;
    if (typeof engine !== 'string') {
      this.problems.push(`${at}.engine: must be the name of an engine under engines`);
      return;
    }
    if (!this.engineKinds.has(engine)) {
      const names = [...this.engineKinds.keys()].join(', ') || 'none';
      this.problems.push(`${at}.engine: there is no engine "${engine}" under engines (engines: ${names})`);
      return;
    }
    // An engine of an unknown kind was reported above; its routes cannot be checked.
    const kind = this.engineKinds.get(engine);
    if (!kind) return;
    const { route: routeKind }: EngineKind = this.kinds[kind];
    if (!this.checkKind(routeKind, ROUTE_COMMON, raw, at)) return;
    // The types the route serves, and the inputs any of them takes.
    const served = type ? [type] : tool.generationTypes;
    const inputs = type ? type.inputs : tool.inputs;
    const base: RouteBase = {
      key,
      tool: tool.id,
      generationType,
      engine,
      describe: this.describe(tool, inputs, raw.describe as Record<string, string> | undefined, `${at}.describe`),
    };
    this.checkInputNames(tool, served, raw.inputs as Record<string, unknown>, `${at}.inputs`);
    const route = routeKind.build(raw, base, {
      at,
      inputs,
      problem: (message) => this.problems.push(message),
      resolve: (file) => resolve(dirname(this.path), file),
    });
    if (route) this.routes.push(route);
  }

  /**
   * A server or a route against the common keys and its kind's; each error becomes a problem at its key path, but at a
   * path in `unset` (a value whose variable is unset was reported as such).
   */
  private checkKind(
    keys: KindKeys,
    common: Readonly<Record<string, unknown>>,
    raw: Json,
    at: string,
    unset: ReadonlySet<string> = new Set(),
  ): boolean {
    let validate = kindValidators.get(keys);
    if (!validate) {
      validate = ajv.compile({
        type: 'object',
        additionalProperties: false,
        required: keys.required,
        properties: { ...common, ...keys.properties },
      });
      kindValidators.set(keys, validate);
    }
    if (validate(raw)) return true;
    for (const error of validate.errors ?? []) {
      if (!unset.has(errorPath(error, at))) this.problems.push(describeError(error, at));
    }
    return false;
  }

  /** Input names that the served types take, and every input one of them requires mapped. */
  private checkInputNames(
    tool: CatalogTool,
    served: readonly CatalogGenerationType[],
    inputs: Record<string, unknown>,
    at: string,
  ): void {
    const names = [...new Set(served.flatMap((type) => type.inputs.map((input) => input.name)))];
    for (const name of Object.keys(inputs)) {
      if (!names.includes(name))
        this.problems.push(`${at}.${name}: tool "${tool.id}" has no input "${name}" (inputs: ${names.join(', ')})`);
    }
    const required = new Set(served.flatMap((type) => type.inputs.filter((input) => input.required)));
    for (const name of new Set([...required].map((input) => input.name))) {
      if (!Object.hasOwn(inputs, name)) this.problems.push(`${at}: the tool's required input "${name}" is not mapped`);
    }
  }

  private describe(
    tool: CatalogTool,
    inputs: readonly CatalogInput[],
    describe: Record<string, string> | undefined,
    at: string,
  ): Record<string, string> {
    const names: string[] = inputs.map((input) => input.name);
    for (const name of Object.keys(describe ?? {})) {
      if (!names.includes(name))
        this.problems.push(`${at}.${name}: tool "${tool.id}" has no input "${name}" (inputs: ${names.join(', ')})`);
    }
    return describe ?? {};
  }

  /** An absolute http(s) URL without credentials, kept without its trailing slash. */
  private url(at: string, value: string, unset: ReadonlySet<string>): string {
    // Its variable is unset, and reported as such: what is left of it is not another problem.
    if (unset.has(at)) return value;
    let url: URL | undefined;
    try {
      url = new URL(value);
    } catch {
      url = undefined;
    }
    if (!url || !['http:', 'https:'].includes(url.protocol)) {
      this.problems.push(`${at}: must be an http(s) URL, got "${value}"`);
    } else if (url.username || url.password) {
      this.problems.push(`${at}: must not hold credentials (send them in headers)`);
    }
    return value.replace(/\/+$/, '');
  }

  /**
   * `${VAR}` in every string of a server's settings, read from the environment; an unset one is a problem, and its key
   * path is added to `unset`.
   */
  private substitute(value: Json, at: string, unset: Set<string>): Json {
    const walk = (node: unknown, path: string): unknown => {
      if (typeof node === 'string') {
        // `$TOKEN`, as a shell or a compose file would take it, is taken here as the text it is: say so at boot. A word
        // of its own (`Bearer $TOKEN` too), so that a literal value with a `$` inside it is left alone.
        for (const [, name] of node.matchAll(BARE_VARIABLE)) {
          this.problems.push(`${path}: write \${${name}} to read ${name} from the environment`);
        }
        return node.replace(VARIABLE, (_whole, name: string) => {
          const found = this.env[name];
          if (found === undefined || found === '') {
            this.problems.push(`${path}: \${${name}} is not set in the environment`);
            unset.add(path);
          }
          return found ?? '';
        });
      }
      if (typeof node === 'object' && node !== null && !Array.isArray(node)) {
        return Object.fromEntries(Object.entries(node).map(([key, child]) => [key, walk(child, `${path}.${key}`)]));
      }
      return node;
    };
    return walk(value, at) as Json;
  }

  /** The file's top-level shape; each error becomes a problem at its key path. */
  private checkFile(root: Json): boolean {
    if (validateFile(root)) return true;
    for (const error of validateFile.errors ?? []) this.problems.push(describeError(error, ''));
    return false;
  }
}
