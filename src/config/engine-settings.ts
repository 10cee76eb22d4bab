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

export interface CogRoute extends RouteBase {
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

export interface ReplicateRoute extends RouteBase {
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
  /** Set from the job id, so another attempt of the same job draws the same seed. */
  seed: ComfyNodeInput | undefined;
}

export type RouteSetting = CogRoute | ReplicateRoute | ComfyRoute;

/** Every model server and route; both empty when no routing file is set and no `ENGINE_<TOOL>` names a server. */
export interface EngineRouting {
  servers: readonly EngineServerSetting[];
  routes: readonly RouteSetting[];
}
