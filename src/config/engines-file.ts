import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Ajv, type ErrorObject } from 'ajv';
import { parseDocument } from 'yaml';
import { type CatalogTool, CATALOG, findTool } from '../catalog/catalog.js';
import { parseDuration } from './duration.js';
import type {
  ComfyNodeInput,
  ComfyRoute,
  ComfyWorkflow,
  EngineServerSetting,
  InputNames,
  ReplicateRoute,
  RouteSetting,
  CogRoute,
} from './engine-settings.js';

const DEFAULT_CONCURRENCY = 1;
/** `${VAR}`: read from the environment in an engine's settings. */
const VARIABLE = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;
/** `$VAR` as a word of its own: a variable written without its braces. */
const BARE_VARIABLE = /(?<=^|\s)\$([A-Za-z_][A-Za-z0-9_]*)(?=\s|$)/g;
const DEFAULT_TIMEOUT = '5m';
const REPLICATE_BASE_URL = 'https://api.replicate.com/v1';
/** ComfyUI's core node classes that load an uploaded image by file name into `inputs.image`. */
const IMAGE_LOADERS = new Set(['LoadImage', 'LoadImageMask']);

const DURATION = {
  type: 'string',
  pattern: '^0*[1-9]\\d*(ms|s|m|h|d)$',
  description: 'a duration above zero, such as 30s, 10m or 2h',
};
const STRING_MAP = { type: 'object', additionalProperties: { type: 'string' } };
const NODE_ID = { type: ['string', 'integer'], description: 'a node id of the workflow, such as "11"' };
const NODE_INPUT = {
  type: 'object',
  additionalProperties: false,
  required: ['node'],
  properties: { node: NODE_ID, input: { type: 'string', minLength: 1 } },
};
const SERVER_COMMON = {
  kind: { enum: ['cog', 'replicate', 'comfyui'] },
  concurrency: { type: 'integer', minimum: 1, maximum: 1000 },
  timeout: DURATION,
  headers: STRING_MAP,
};
const ROUTE_COMMON = { engine: { type: 'string' }, describe: STRING_MAP };
const MODEL_INPUTS = { type: 'object', additionalProperties: { type: 'string', minLength: 1 } };

/** The file's shape, and each kind's server and route; the references between them are checked in code. */
const SCHEMAS = {
  file: {
    type: 'object',
    additionalProperties: false,
    properties: {
      engines: { type: 'object', additionalProperties: { type: 'object', required: ['kind'] } },
      routes: { type: 'object', additionalProperties: { type: 'object', required: ['engine'] } },
    },
    // Compose's convention for settings shared through anchors (`x-gpu: &gpu`): read by nothing but the YAML merge.
    patternProperties: { '^x-': {} },
  },
  'server:cog': {
    type: 'object',
    additionalProperties: false,
    required: ['url'],
    properties: { ...SERVER_COMMON, url: { type: 'string' } },
  },
  'server:comfyui': {
    type: 'object',
    additionalProperties: false,
    required: ['url'],
    properties: { ...SERVER_COMMON, url: { type: 'string' } },
  },
  'server:replicate': {
    type: 'object',
    additionalProperties: false,
    required: ['token'],
    properties: { ...SERVER_COMMON, token: { type: 'string', minLength: 1 }, base_url: { type: 'string' } },
  },
  'route:cog': {
    type: 'object',
    additionalProperties: false,
    required: ['inputs'],
    properties: { ...ROUTE_COMMON, inputs: MODEL_INPUTS, params: { type: 'object' } },
  },
  'route:replicate': {
    type: 'object',
    additionalProperties: false,
    required: ['inputs'],
    properties: {
      ...ROUTE_COMMON,
      model: {
        type: 'string',
        pattern: '^[\\w.-]+/[\\w.-]+$',
        description:
          'owner/name of an official model, such as black-forest-labs/flux-kontext-pro, or of the version given',
      },
      version: { type: 'string', pattern: '^[0-9a-f]{64}$', description: 'a model version id: 64 hex digits' },
      inputs: MODEL_INPUTS,
      params: { type: 'object' },
    },
  },
  'route:comfyui': {
    type: 'object',
    additionalProperties: false,
    required: ['workflow', 'inputs', 'output'],
    properties: {
      ...ROUTE_COMMON,
      workflow: { type: 'string', minLength: 1 },
      inputs: { type: 'object', additionalProperties: NODE_INPUT },
      output: { type: 'object', additionalProperties: false, required: ['node'], properties: { node: NODE_ID } },
      seed: { ...NODE_INPUT, required: ['node', 'input'] },
    },
  },
} as const;

type SchemaName = keyof typeof SCHEMAS;
type Json = Record<string, unknown>;

const ajv = new Ajv({ allErrors: true, verbose: true, strict: false });
const validators = Object.fromEntries(
  Object.entries(SCHEMAS).map(([name, schema]) => [name, ajv.compile(schema)]),
) as Record<SchemaName, ReturnType<typeof ajv.compile>>;

export interface EnginesFile {
  servers: EngineServerSetting[];
  routes: RouteSetting[];
}

/**
 * Reads and checks the routing file (`ENGINES_FILE`, see docs/engines.md). Every problem is reported, each naming its
 * key path (`routes.fashion_swap.inputs.person.node: ...`); `problems` is empty when the file is good.
 */
export function readEnginesFile(path: string, env: NodeJS.ProcessEnv): { file: EnginesFile; problems: string[] } {
  return new EnginesFileReader(resolve(path), env).read();
}

class EnginesFileReader {
  private readonly problems: string[] = [];
  private readonly servers = new Map<string, EngineServerSetting>();
  /**
   * Every engine the file names, with its kind when that is known: a route to an engine refused for a problem of its
   * own is still checked against its kind, so that one run shows every problem.
   */
  private readonly kinds = new Map<string, EngineServerSetting['kind'] | undefined>();
  private readonly routes: RouteSetting[] = [];

  constructor(
    private readonly path: string,
    private readonly env: NodeJS.ProcessEnv,
  ) {}

  read(): { file: EnginesFile; problems: string[] } {
    const root = this.parse();
    if (root && this.check('file', root, '')) {
      for (const [name, server] of Object.entries((root.engines ?? {}) as Record<string, Json>)) {
        this.server(name, server);
      }
      for (const [key, route] of Object.entries((root.routes ?? {}) as Record<string, Json>)) this.route(key, route);
    }
    const problems = this.problems.map((problem) => `ENGINES_FILE ${this.path}: ${problem}`);
    return { file: { servers: [...this.servers.values()], routes: this.routes }, problems };
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
    const kind = raw.kind as EngineServerSetting['kind'];
    if (!['cog', 'replicate', 'comfyui'].includes(kind)) {
      this.kinds.set(name, undefined);
      this.problems.push(`${at}.kind: must be one of cog, replicate, comfyui, got ${JSON.stringify(raw.kind)}`);
      return;
    }
    this.kinds.set(name, kind);
    const unset = new Set<string>();
    const server = this.substitute(raw, at, unset);
    if (!this.check(`server:${kind}`, server, at, unset)) return;
    const common = {
      name,
      concurrency: (server.concurrency as number | undefined) ?? DEFAULT_CONCURRENCY,
      timeoutMs: parseDuration((server.timeout as string | undefined) ?? DEFAULT_TIMEOUT),
      headers: (server.headers ?? {}) as Record<string, string>,
    };
    if (kind === 'replicate') {
      const baseUrl = this.url(`${at}.base_url`, (server.base_url as string | undefined) ?? REPLICATE_BASE_URL, unset);
      this.servers.set(name, { ...common, kind, token: server.token as string, baseUrl });
    } else {
      this.servers.set(name, { ...common, kind, url: this.url(`${at}.url`, server.url as string, unset) });
    }
  }

  private route(key: string, raw: Json): void {
    const at = `routes.${key}`;
    const [toolId, generationType, ...rest] = key.split('/');
    const tool = findTool(toolId);
    if (rest.length > 0) {
      this.problems.push(`${at}: routes are named "tool" or "tool/generation_type", with one slash at most`);
      return;
    }
    if (!tool) {
      const tools = CATALOG.map((t) => t.id).join(', ');
      this.problems.push(
        `${at}: routes are named "tool" or "tool/generation_type"; there is no tool "${toolId}" (tools: ${tools})`,
      );
      return;
    }
    if (generationType !== undefined && !tool.generationTypes.some((type) => type.id === generationType)) {
      const types = tool.generationTypes.map((type) => type.id).join(', ');
      this.problems.push(`${at}: tool "${tool.id}" has no generation type "${generationType}" (types: ${types})`);
      return;
    }
    const engine = raw.engine;
    if (typeof engine !== 'string') {
      this.problems.push(`${at}.engine: must be the name of an engine under engines`);
      return;
    }
    if (!this.kinds.has(engine)) {
      const names = [...this.kinds.keys()].join(', ') || 'none';
      this.problems.push(`${at}.engine: there is no engine "${engine}" under engines (engines: ${names})`);
      return;
    }
    // An engine of an unknown kind was reported above; its routes cannot be checked.
    const kind = this.kinds.get(engine);
    if (!kind) return;
    if (!this.check(`route:${kind}`, raw, at)) return;
    const base = {
      key,
      tool: tool.id,
      generationType,
      engine,
      describe: this.describe(tool, raw.describe as Record<string, string> | undefined, `${at}.describe`),
    };
    const inputs = raw.inputs as Record<string, unknown>;
    this.checkInputNames(tool, inputs, `${at}.inputs`);
    if (kind !== 'comfyui') {
      this.checkModelNames(inputs as InputNames, raw.params as Json | undefined, at);
      this.checkNoVariables(raw.params, `${at}.params`);
    }
    switch (kind) {
      case 'cog': {
        const route: CogRoute = {
          ...base,
          kind: 'cog',
          inputs: inputs as InputNames,
          params: (raw.params ?? {}) as Json,
          passGenerationType: false,
        };
        this.routes.push(route);
        break;
      }
      case 'replicate': {
        if (raw.model === undefined && raw.version === undefined) {
          this.problems.push(
            `${at}: set model (owner/name of an official model), version (64 hex digits), or both (that version of that model)`,
          );
          return;
        }
        const route: ReplicateRoute = {
          ...base,
          kind: 'replicate',
          model: raw.model as string | undefined,
          version: raw.version as string | undefined,
          inputs: inputs as InputNames,
          params: (raw.params ?? {}) as Json,
        };
        this.routes.push(route);
        break;
      }
      case 'comfyui': {
        const route = this.comfyRoute(base, tool, raw, at);
        if (route) this.routes.push(route);
        break;
      }
    }
  }

  private comfyRoute(
    base: Pick<ComfyRoute, 'key' | 'tool' | 'generationType' | 'engine' | 'describe'>,
    tool: CatalogTool,
    raw: Json,
    at: string,
  ): ComfyRoute | undefined {
    const workflowFile = raw.workflow as string;
    const workflow = this.workflow(workflowFile, `${at}.workflow`);
    if (!workflow) return undefined;
    const inputs: Record<string, ComfyNodeInput> = {};
    for (const [name, mapping] of Object.entries(
      raw.inputs as Record<string, { node: string | number; input?: string }>,
    )) {
      const input = tool.inputs.find((candidate) => candidate.name === name);
      if (!input) continue;
      const where = `${at}.inputs.${name}`;
      const node = String(mapping.node);
      const found = workflow[node];
      if (!found) {
        this.problems.push(`${where}.node: node "${node}" is not in ${workflowFile}`);
        continue;
      }
      if (input.kind === 'image') {
        if (!IMAGE_LOADERS.has(found.class_type)) {
          this.problems.push(
            `${where}.node: node "${node}" is a ${found.class_type}, not an image loader (${[...IMAGE_LOADERS].join(' or ')}) that an image input can fill`,
          );
          continue;
        }
        const loaderInput = mapping.input ?? 'image';
        if (!this.settableInput(workflow, node, loaderInput, `${where}.input`, workflowFile)) continue;
        inputs[name] = { node, input: loaderInput };
      } else {
        if (mapping.input === undefined) {
          this.problems.push(`${where}.input: a text input needs the node input it sets, such as "text"`);
          continue;
        }
        if (!this.settableInput(workflow, node, mapping.input, `${where}.input`, workflowFile)) continue;
        inputs[name] = { node, input: mapping.input };
      }
    }
    const outputNode = String((raw.output as { node: string | number }).node);
    if (!workflow[outputNode]) this.problems.push(`${at}.output.node: node "${outputNode}" is not in ${workflowFile}`);
    let seed: ComfyNodeInput | undefined;
    if (raw.seed) {
      const { node: seedNode, input } = raw.seed as { node: string | number; input: string };
      const node = String(seedNode);
      if (!workflow[node]) this.problems.push(`${at}.seed.node: node "${node}" is not in ${workflowFile}`);
      else if (this.settableInput(workflow, node, input, `${at}.seed.input`, workflowFile)) seed = { node, input };
    }
    // Two values set into one node input: the last would win and the other would never reach the model.
    const filled = new Map<string, string>();
    const targets = [
      ...Object.entries(inputs).map(([name, target]) => [`${at}.inputs.${name}`, target] as const),
      ...(seed ? [[`${at}.seed`, seed] as const] : []),
    ];
    for (const [where, { node, input }] of targets) {
      const slot = `${node}\0${input}`;
      const first = filled.get(slot);
      if (first) this.problems.push(`${where}: node "${node}" input "${input}" is already set by ${first}`);
      else filled.set(slot, where);
    }
    return { ...base, kind: 'comfyui', workflowFile, workflow, inputs, output: { node: outputNode }, seed };
  }

  /**
   * A node input a value can be set into: one the node has, holding a value (a widget's), not a link from another
   * node's output (`["4", 1]` in the API format). Set over a link, the value would cut the node from its source, and
   * the prompt would fail only on the server, after every job's uploads.
   */
  private settableInput(workflow: ComfyWorkflow, node: string, input: string, at: string, file: string): boolean {
    const { class_type: type, inputs } = workflow[node];
    if (!Object.hasOwn(inputs, input)) {
      const known = Object.keys(inputs).join(', ') || 'none';
      this.problems.push(`${at}: node "${node}" (${type}) in ${file} has no input "${input}" (inputs: ${known})`);
      return false;
    }
    const value = inputs[input];
    if (Array.isArray(value) && value.length === 2 && typeof value[1] === 'number') {
      this.problems.push(
        `${at}: node "${node}" (${type}) input "${input}" in ${file} is a link from node "${String(value[0])}", not a value to set`,
      );
      return false;
    }
    return true;
  }

  /** The workflow file, relative to the routing file, in ComfyUI's API format: `{"<id>": {class_type, inputs}}`. */
  private workflow(file: string, at: string): ComfyWorkflow | undefined {
    const path = resolve(dirname(this.path), file);
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(path, 'utf8'));
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      this.problems.push(
        `${at}: ${file} ${code === 'ENOENT' ? 'does not exist' : code ? `cannot be read (${code})` : 'is not JSON'}`,
      );
      return undefined;
    }
    const nodes = typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? Object.entries(parsed) : [];
    const apiFormat =
      nodes.length > 0 &&
      nodes.every(
        ([, node]) =>
          typeof node === 'object' &&
          node !== null &&
          typeof (node as Json).class_type === 'string' &&
          typeof (node as Json).inputs === 'object' &&
          (node as Json).inputs !== null,
      );
    if (!apiFormat) {
      this.problems.push(
        `${at}: ${file} is not a workflow in API format ({"<node id>": {"class_type", "inputs"}}); in ComfyUI, save it with Workflow > Export (API)`,
      );
      return undefined;
    }
    return parsed as ComfyWorkflow;
  }

  /**
   * No `${VAR}` in a route's params: only an engine's settings are read from the environment, so the model would be
   * sent the text `${VAR}` itself (a token given as a model input, say) without a word.
   */
  private checkNoVariables(value: unknown, at: string): void {
    if (typeof value === 'string') {
      for (const [, name] of value.matchAll(VARIABLE)) {
        this.problems.push(
          `${at}: \${${name}} is not read from the environment in a route, only in an engine's settings (engines.<name>)`,
        );
      }
    } else if (typeof value === 'object' && value !== null) {
      for (const [key, child] of Object.entries(value)) {
        this.checkNoVariables(child, Array.isArray(value) ? `${at}[${key}]` : `${at}.${key}`);
      }
    }
  }

  /**
   * Each of the model's inputs given once, by one tool input or one param: two values under one name would reach the
   * model as one, and the other input would be dropped without a word.
   */
  private checkModelNames(inputs: InputNames, params: Json | undefined, at: string): void {
    const given = new Map<string, string>();
    for (const [name, modelName] of Object.entries(inputs)) {
      const first = given.get(modelName);
      if (first)
        this.problems.push(`${at}.inputs.${name}: the model's input "${modelName}" is already given by ${first}`);
      else given.set(modelName, `${at}.inputs.${name}`);
    }
    for (const name of Object.keys(params ?? {})) {
      const first = given.get(name);
      if (first) this.problems.push(`${at}.params.${name}: the model's input "${name}" is already given by ${first}`);
    }
  }

  /** Input names that are the tool's, and every required input of the tool mapped. */
  private checkInputNames(tool: CatalogTool, inputs: Record<string, unknown>, at: string): void {
    const names: string[] = tool.inputs.map((input) => input.name);
    for (const name of Object.keys(inputs)) {
      if (!names.includes(name))
        this.problems.push(`${at}.${name}: tool "${tool.id}" has no input "${name}" (inputs: ${names.join(', ')})`);
    }
    for (const input of tool.inputs) {
      if (input.required && !Object.hasOwn(inputs, input.name)) {
        this.problems.push(`${at}: the tool's required input "${input.name}" is not mapped`);
      }
    }
  }

  private describe(
    tool: CatalogTool,
    describe: Record<string, string> | undefined,
    at: string,
  ): Record<string, string> {
    const names: string[] = tool.inputs.map((input) => input.name);
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

  /**
   * Checks `value` against a schema; each error becomes a problem at its key path, but at a path in `unset`: a value
   * whose variable is unset was reported as such, and its being empty is not another problem.
   */
  private check(schema: SchemaName, value: unknown, at: string, unset: ReadonlySet<string> = new Set()): boolean {
    const validate = validators[schema];
    if (validate(value)) return true;
    for (const error of validate.errors ?? []) {
      if (!unset.has(errorPath(error, at))) this.problems.push(describeError(error, at));
    }
    return false;
  }
}

/** The key path of the value a schema error is about. */
function errorPath(error: ErrorObject, at: string): string {
  return [at, ...error.instancePath.split('/').slice(1).map(unescapePointer)].filter(Boolean).join('.');
}

function describeError(error: ErrorObject, at: string): string {
  const path = errorPath(error, at);
  const params = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case 'additionalProperties': {
      const allowed = Object.keys((error.parentSchema as { properties?: object }).properties ?? {}).join(', ');
      return `${join(path, String(params.additionalProperty))}: unknown key${allowed ? ` (allowed: ${allowed})` : ''}`;
    }
    case 'required':
      return `${join(path, String(params.missingProperty))}: is required`;
    case 'type': {
      const description = (error.parentSchema as { description?: string } | undefined)?.description;
      return `${path}: must be ${description ?? article(String(params.type))}`;
    }
    case 'enum':
      return `${path}: must be one of ${(params.allowedValues as unknown[]).join(', ')}`;
    default: {
      const description = (error.parentSchema as { description?: string } | undefined)?.description;
      return description ? `${path}: must be ${description}` : `${path}: ${error.message}`;
    }
  }
}

function join(path: string, key: string): string {
  return path ? `${path}.${key}` : key;
}

function article(type: string): string {
  const names: Record<string, string> = {
    object: 'a mapping',
    string: 'a string',
    integer: 'a whole number',
    'string,integer': 'a string',
    array: 'a list',
  };
  return names[type] ?? type;
}

function unescapePointer(segment: string): string {
  return segment.replace(/~1/g, '/').replace(/~0/g, '~');
}
