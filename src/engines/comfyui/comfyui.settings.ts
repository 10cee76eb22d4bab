import { readFileSync } from 'node:fs';
import type { RouteCheckContext, EngineKind } from '../../config/engines-file.js';
import { POOL_PROPERTIES, poolSetting } from '../pool/pool.settings.js';
import type { ComfyNodeInput, ComfyRoute, ComfyServerSetting, ComfyWorkflow } from '../../config/engine-settings.js';

/** ComfyUI's core node classes that load an uploaded image by file name into `inputs.image`. */
const IMAGE_LOADERS = new Set(['LoadImage', 'LoadImageMask']);
const NODE_ID = { type: ['string', 'integer'], description: 'a node id of the workflow, such as "11"' };
const NODE_INPUT = {
  type: 'object',
  additionalProperties: false,
  required: ['node'],
  properties: { node: NODE_ID, input: { type: 'string', minLength: 1 } },
};

type NodeMapping = { node: string | number; input?: string };

/**
 * A ComfyUI server (its URL, or a pool of them), and a route to a workflow on it: the workflow file (relative to the routing file), the node input each tool input
 * sets, the output node and the seed's node input, each checked against the workflow.
 */
export const COMFYUI_SETTINGS: EngineKind<ComfyServerSetting, ComfyRoute> = {
  server: {
    required: [],
    properties: POOL_PROPERTIES,
    build: (raw, common, context) => ({ ...common, kind: 'comfyui', ...poolSetting(raw, context) }),
  },
  route: {
    required: ['workflow', 'inputs', 'output'],
    properties: {
      workflow: { type: 'string', minLength: 1 },
      inputs: { type: 'object', additionalProperties: NODE_INPUT },
      output: { type: 'object', additionalProperties: false, required: ['node'], properties: { node: NODE_ID } },
      seed: { ...NODE_INPUT, required: ['node', 'input'] },
      batch: { ...NODE_INPUT, required: ['node', 'input'] },
      repeat: { type: 'boolean', description: 'run the workflow once for each result, with seeds seed, seed+1, ...' },
    },
    build(raw, base, context) {
      const { at, problem } = context;
      const workflowFile = raw.workflow as string;
      const workflow = readWorkflow(workflowFile, `${at}.workflow`, context);
      if (!workflow) return undefined;
      const settable = (node: string, input: string, where: string) =>
        settableInput(workflow, node, input, where, workflowFile, problem);
      const inputs: Record<string, ComfyNodeInput> = {};
      for (const [name, mapping] of Object.entries(raw.inputs as Record<string, NodeMapping>)) {
        const input = context.inputs.find((candidate) => candidate.name === name);
        if (!input) continue;
        const where = `${at}.inputs.${name}`;
        const node = String(mapping.node);
        const found = workflow[node];
        if (!found) {
          problem(`${where}.node: node "${node}" is not in ${workflowFile}`);
          continue;
        }
        if (input.kind === 'image') {
          if (!IMAGE_LOADERS.has(found.class_type)) {
            problem(
              `${where}.node: node "${node}" is a ${found.class_type}, not an image loader (${[...IMAGE_LOADERS].join(' or ')}) that an image input can fill`,
            );
            continue;
          }
          const loaderInput = mapping.input ?? 'image';
          if (!settable(node, loaderInput, `${where}.input`)) continue;
          inputs[name] = { node, input: loaderInput };
        } else {
          if (mapping.input === undefined) {
            problem(`${where}.input: a text input needs the node input it sets, such as "text"`);
            continue;
          }
          if (!settable(node, mapping.input, `${where}.input`)) continue;
          inputs[name] = { node, input: mapping.input };
        }
      }
      const outputNode = String((raw.output as { node: string | number }).node);
      if (!workflow[outputNode]) problem(`${at}.output.node: node "${outputNode}" is not in ${workflowFile}`);
      let seed: ComfyNodeInput | undefined;
      if (raw.seed) {
        const { node: seedNode, input } = raw.seed as { node: string | number; input: string };
        const node = String(seedNode);
        if (!workflow[node]) problem(`${at}.seed.node: node "${node}" is not in ${workflowFile}`);
        else if (settable(node, input, `${at}.seed.input`)) seed = { node, input };
      }
      let batch: ComfyNodeInput | undefined;
      if (raw.batch) {
        const { node: batchNode, input } = raw.batch as { node: string | number; input: string };
        const node = String(batchNode);
        if (!workflow[node]) problem(`${at}.batch.node: node "${node}" is not in ${workflowFile}`);
        else if (settable(node, input, `${at}.batch.input`)) batch = { node, input };
      }
      if (raw.batch && raw.repeat === true)
        problem(`${at}.repeat: the workflow makes a batch already; set one of them`);
      const outputs = batch ? { batch } : raw.repeat === true ? ('repeat' as const) : undefined;
      // Two values set into one node input: the last would win and the other would never reach the model.
      const filled = new Map<string, string>();
      const targets = [
        ...Object.entries(inputs).map(([name, target]) => [`${at}.inputs.${name}`, target] as const),
        ...(seed ? [[`${at}.seed`, seed] as const] : []),
        ...(batch ? [[`${at}.batch`, batch] as const] : []),
      ];
      for (const [where, { node, input }] of targets) {
        const slot = `${node}\0${input}`;
        const first = filled.get(slot);
        if (first) problem(`${where}: node "${node}" input "${input}" is already set by ${first}`);
        else filled.set(slot, where);
      }
      return {
        ...base,
        kind: 'comfyui',
        workflowFile,
        workflow,
        inputs,
        output: { node: outputNode },
        seed,
        ...(outputs && { outputs }),
      };
    },
  },
};

/**
 * A node input a value can be set into: one the node has, holding a value (a widget's), not a link from another
 * node's output (`["4", 1]` in the API format). Set over a link, the value would cut the node from its source, and
 * the prompt would fail only on the server, after every job's uploads.
 */
function settableInput(
  workflow: ComfyWorkflow,
  node: string,
  input: string,
  at: string,
  file: string,
  problem: (message: string) => void,
): boolean {
  const { class_type: type, inputs } = workflow[node];
  if (!Object.hasOwn(inputs, input)) {
    const known = Object.keys(inputs).join(', ') || 'none';
    problem(`${at}: node "${node}" (${type}) in ${file} has no input "${input}" (inputs: ${known})`);
    return false;
  }
  const value = inputs[input];
  if (Array.isArray(value) && value.length === 2 && typeof value[1] === 'number') {
    problem(
      `${at}: node "${node}" (${type}) input "${input}" in ${file} is a link from node "${String(value[0])}", not a value to set`,
    );
    return false;
  }
  return true;
}

/** The workflow file, relative to the routing file, in ComfyUI's API format: `{"<id>": {class_type, inputs}}`. */
function readWorkflow(file: string, at: string, context: RouteCheckContext): ComfyWorkflow | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(context.resolve(file), 'utf8'));
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    context.problem(
      `${at}: ${file} ${code === 'ENOENT' ? 'does not exist' : code ? `cannot be read (${code})` : 'is not JSON'}`,
    );
    return undefined;
  }
  const nodes = typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? Object.entries(parsed) : [];
  const apiFormat =
    nodes.length > 0 &&
    nodes.every(([, node]) => {
      const { class_type: type, inputs } = (node ?? {}) as Partial<Record<string, unknown>>;
      return typeof node === 'object' && typeof type === 'string' && typeof inputs === 'object' && inputs !== null;
    });
  if (!apiFormat) {
    context.problem(
      `${at}: ${file} is not a workflow in API format ({"<node id>": {"class_type", "inputs"}}); in ComfyUI, save it with Workflow > Export (API)`,
    );
    return undefined;
  }
  return parsed as ComfyWorkflow;
}
