/**
 * The routing file's settings as the engines receive them (see docs/engines.md and ENGINES_FILE): model servers by
 * name, and routes from a tool, or one generation type of a tool, to one of them. Parsed and checked once at boot by
 * `engines-file.ts`; engines import only these types.
 */

/** What every model server has, whatever its kind. */
export interface ServerBase {
  /** The operator's name for the server: the routing file's key under `engines`. */
  name: string;
  /** Jobs in flight on this server at once, across all worker processes. */
  concurrency: number;
  /** One job's limit on this server; past it the job ends `timeout`. */
  timeoutMs: number;
  /** Sent with every request to the server, `${VAR}`s already read from the environment. */
  headers: Readonly<Record<string, string>>;
}

/**
 * The model servers behind one engine (docs/engines.md, "Pools"): each takes the engine's `concurrency` jobs at once.
 */
export interface PoolSetting {
  /** Base URL of the server, without a trailing slash; a pool's first, or with `discover` the name to resolve. */
  url: string;
  /** Every server's base URL, `url` alone for one server; with `discover`, `[url]` (the addresses come at run time). */
  urls: readonly string[];
  /** `dns`: every address `url`'s host name resolves to is a server, looked up again every 15 s. */
  discover: 'dns' | undefined;
}

export interface CogServerSetting extends ServerBase, PoolSetting {
  kind: 'cog';
}

export interface ReplicateServerSetting extends ServerBase {
  kind: 'replicate';
  token: string;
  /** Base URL of Replicate's HTTP API (`https://api.replicate.com/v1` unless set), without a trailing slash. */
  baseUrl: string;
}

export interface ComfyServerSetting extends ServerBase, PoolSetting {
  kind: 'comfyui';
}

export type EngineServerSetting = CogServerSetting | ReplicateServerSetting | ComfyServerSetting;
export type RemoteEngineKind = EngineServerSetting['kind'];

/** What every route has, whatever its engine's kind. */
export interface RouteBase {
  /** As written in the file: `tool` or `tool/generation_type`. */
  key: string;
  tool: string;
  /** Unset: every generation type of the tool without a route of its own. */
  generationType: string | undefined;
  /** The server's name under `engines`. */
  engine: string;
  /** What clients are told each input needs, by the tool's input name (replacing the local engine's texts). */
  describe: Readonly<Record<string, string>>;
}

/** A tool's input name -> the model's input name. Inputs the tool has but the route does not map are not sent. */
export type InputNames = Readonly<Record<string, string>>;

/**
 * How a Cog or Replicate model makes several results (ENGINES.md "Seeds and variants per kind"): its input that takes
 * how many (`num_outputs:`), at most `max` (`max_outputs:`), or one run per result (`repeat: true`).
 */
export type ModelOutputs = { input: string; max: number } | 'repeat';

/** The seed input and the several results a Cog or Replicate route declares; both unset, the model takes neither. */
export interface ModelVariants {
  /** The model's input that takes the job's seed (`seed:`). */
  seedInput?: string;
  outputs?: ModelOutputs;
}

export interface CogRoute extends RouteBase, ModelVariants {
  kind: 'cog';
  inputs: InputNames;
  /** Fixed inputs sent with every job, beside the mapped ones. */
  params: Readonly<Record<string, unknown>>;
  /**
   * Send the job's generation type as the `generation_type` input: the `ENGINE_<TOOL>=cog:<url>` shortcut's
   * contract, for a model built to take the service's own names.
   */
  passGenerationType: boolean;
}

export interface ReplicateRoute extends RouteBase, ModelVariants {
  kind: 'replicate';
  /**
   * `owner/name`: alone, an official model run at its latest version; with `version`, the model that version is of,
   * whose schema the mapped names are checked against.
   */
  model: string | undefined;
  /** A model version id (64 hex digits), run by version: any model's. */
  version: string | undefined;
  inputs: InputNames;
  params: Readonly<Record<string, unknown>>;
}

/** One node of a ComfyUI workflow in API format ("Export (API)"): `{"<id>": {class_type, inputs}}`. */
export interface ComfyNode {
  class_type: string;
  inputs: Record<string, unknown>;
  _meta?: { title?: string };
}

export type ComfyWorkflow = Readonly<Record<string, ComfyNode>>;

/** Where a value goes in the workflow: `nodes[node].inputs[input]`. */
export interface ComfyNodeInput {
  node: string;
  input: string;
}

export interface ComfyRoute extends RouteBase {
  kind: 'comfyui';
  /** The workflow file's path as written in the routing file (relative to it), for messages. */
  workflowFile: string;
  workflow: ComfyWorkflow;
  /** A tool's input -> the node input it sets; an image input names a LoadImage node's `image`. */
  inputs: Readonly<Record<string, ComfyNodeInput>>;
  /** The node whose first image is the result. */
  output: { node: string };
  /** Set to the job's seed: the one sent, else one drawn from the job id, so every attempt draws the same. */
  seed: ComfyNodeInput | undefined;
  /** How the workflow makes several results: an EmptyLatentImage's `batch_size` (`batch:`), or one run each. */
  outputs?: { batch: ComfyNodeInput } | 'repeat';
}

export type RouteSetting = CogRoute | ReplicateRoute | ComfyRoute;

/** The most results one job may ask for, whatever its route. */
export const MAX_OUTPUTS = 4;

/** What a route's model takes of a job's `seed` and `num_outputs`. */
export interface RouteVariants {
  /** It takes a seed: the job's, or one drawn. */
  seed: boolean;
  /** How it makes several results: in one run (`batch`), one run each (`repeat`), or not at all. */
  several: 'none' | 'batch' | 'repeat';
  /** The most results a job on it may ask for. */
  maxOutputs: number;
}

/**
 * What a route (undefined: the local engine) takes of a job's seed and number of results. The local engine takes a
 * seed and ignores it, being deterministic, and makes one result.
 */
export function variantsOf(route: RouteSetting | undefined): RouteVariants {
  if (!route) return { seed: true, several: 'none', maxOutputs: 1 };
  const seed = route.kind === 'comfyui' ? route.seed !== undefined : route.seedInput !== undefined;
  const { outputs } = route;
  if (outputs === undefined) return { seed, several: 'none', maxOutputs: 1 };
  if (outputs === 'repeat') return { seed, several: 'repeat', maxOutputs: MAX_OUTPUTS };
  return { seed, several: 'batch', maxOutputs: 'max' in outputs ? Math.min(outputs.max, MAX_OUTPUTS) : MAX_OUTPUTS };
}

/** The route a job of this tool and generation type takes: its type's own, else its tool's; undefined: local. */
export function routeOf(routing: EngineRouting, tool: string, generationType: string): RouteSetting | undefined {
  return (
    routing.routes.find((route) => route.tool === tool && route.generationType === generationType) ??
    routing.routes.find((route) => route.tool === tool && route.generationType === undefined)
  );
}

/** Every model server and route; both empty when no routing file is set and no `ENGINE_<TOOL>` names a server. */
export interface EngineRouting {
  servers: readonly EngineServerSetting[];
  routes: readonly RouteSetting[];
}
