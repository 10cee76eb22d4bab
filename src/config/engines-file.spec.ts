import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { AppConfig, ConfigError } from './config.js';
import { variantsOf } from './engine-settings.js';

const EXAMPLE = resolve('docs/routing/engines.yaml');
const EXAMPLE_ENV = {
  VTON_URL: 'http://gpu-2:5000',
  REPLICATE_API_TOKEN: 'r8_test',
  COMFY_URL: 'http://gpu-1:8188',
  COMFY_TOKEN: 'secret',
};

const WORKFLOW = {
  '3': { class_type: 'KSampler', inputs: { seed: 1, steps: 20, model: ['4', 0] } },
  '4': { class_type: 'CheckpointLoaderSimple', inputs: { ckpt_name: 'model.safetensors' } },
  '6': { class_type: 'CLIPTextEncode', inputs: { text: 'a photo', clip: ['4', 1] } },
  '11': { class_type: 'LoadImage', inputs: { image: 'person.png' } },
  '12': { class_type: 'LoadImage', inputs: { image: 'clothes.png' } },
  '15': { class_type: 'SaveImage', inputs: { filename_prefix: 'out', images: ['3', 0] } },
  '20': { class_type: 'EmptyLatentImage', inputs: { width: 512, height: 512, batch_size: 1 } },
};

/** A folder with the routing file (and its workflows), as an operator would lay it out. */
function routingFile(yaml: string, files: Record<string, unknown> = { 'workflows/try-on.json': WORKFLOW }): string {
  const dir = mkdtempSync(join(tmpdir(), 'engines-file-'));
  for (const [name, content] of Object.entries(files)) {
    const path = join(dir, name);
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content));
  }
  const path = join(dir, 'engines.yaml');
  writeFileSync(path, yaml);
  return path;
}

function problemsOf(env: Record<string, string>): string[] {
  try {
    new AppConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  throw new Error('expected the configuration to be refused');
}

const COMFY_ENGINE = `
engines:
  comfy:
    kind: comfyui
    url: http://gpu-1:8188
`;

describe('the routing file (ENGINES_FILE)', () => {
  it('reads the documented example: every kind, its defaults, and routes by tool and by generation type', () => {
    const sut = new AppConfig({ ENGINES_FILE: EXAMPLE, ...EXAMPLE_ENV });

    const servers = Object.fromEntries(sut.engineRouting.servers.map((server) => [server.name, server]));
    expect(servers.vton).toEqual({
      name: 'vton',
      kind: 'cog',
      url: 'http://gpu-2:5000',
      urls: ['http://gpu-2:5000'],
      discover: undefined,
      concurrency: 1,
      timeoutMs: 180_000,
      headers: {},
    });
    expect(servers.replicate).toMatchObject({
      kind: 'replicate',
      token: 'r8_test',
      baseUrl: 'https://api.replicate.com/v1',
      concurrency: 4,
    });
    expect(servers.comfy).toMatchObject({
      kind: 'comfyui',
      timeoutMs: 240_000,
      headers: { Authorization: 'Bearer secret' },
    });
    const routes = Object.fromEntries(sut.engineRouting.routes.map((route) => [route.key, route]));
    expect(routes['fashion_swap_half/upper']).toMatchObject({
      kind: 'cog',
      tool: 'fashion_swap_half',
      generationType: 'upper',
      inputs: { person: 'human_img', clothes: 'garm_img' },
      params: { category: 'upper_body', garment_des: 'a garment' },
      passGenerationType: false,
    });
    expect(routes.default).toMatchObject({
      kind: 'replicate',
      model: 'nightmareai/real-esrgan',
      version: 'f121d640bd286e1fdc67f9799164c1d5be36ff74576ee11c803ae5b665dd46aa',
    });
    expect(routes.furniture).toMatchObject({
      kind: 'comfyui',
      generationType: undefined,
      inputs: { room: { node: '1', input: 'image' }, furniture: { node: '2', input: 'image' } },
      output: { node: '5' },
    });
  });

  it("takes a pool of listed servers and a pool found by DNS, each server taking the engine's concurrency", () => {
    const path = routingFile(`
engines:
  vton:
    kind: cog
    urls: [http://gpu-1:5000/, http://gpu-2:5000]
    concurrency: 2
  comfy:
    kind: comfyui
    url: http://comfy-gpu.default.svc:8188
    discover: dns
routes:
  default:
    engine: vton
    inputs: { image: image }
`);

    const sut = new AppConfig({ ENGINES_FILE: path });

    const servers = Object.fromEntries(sut.engineRouting.servers.map((server) => [server.name, server]));
    expect(servers.vton).toMatchObject({
      url: 'http://gpu-1:5000',
      urls: ['http://gpu-1:5000', 'http://gpu-2:5000'],
      discover: undefined,
      concurrency: 2,
    });
    expect(servers.comfy).toMatchObject({
      url: 'http://comfy-gpu.default.svc:8188',
      urls: ['http://comfy-gpu.default.svc:8188'],
      discover: 'dns',
    });
  });

  it("takes each route's seed and results as declared, and what they let a job ask for", () => {
    const path = routingFile(`
engines:
  vton: { kind: cog, url: http://gpu-1:5000 }
  comfy: { kind: comfyui, url: http://gpu-1:8188 }
routes:
  fashion_swap:
    engine: vton
    inputs: { person: human_img, clothes: garm_img }
    seed: seed
    num_outputs: num_outputs
    max_outputs: 2
  fabric:
    engine: vton
    inputs: { fabric: fabric, target: target }
    repeat: true
  default:
    engine: comfy
    workflow: workflows/try-on.json
    inputs:
      image: { node: "11" }
      prompt: { node: "6", input: text }
    output: { node: "15" }
    seed: { node: "3", input: seed }
    batch: { node: "20", input: batch_size }
  fashion_card:
    engine: vton
    inputs: { clothes: clothes }
`);
    const sut = new AppConfig({ ENGINES_FILE: path });

    const variants = Object.fromEntries(sut.engineRouting.routes.map((route) => [route.key, variantsOf(route)]));
    expect(variants).toEqual({
      fashion_swap: { seed: true, several: 'batch', maxOutputs: 2 },
      fabric: { seed: false, several: 'repeat', maxOutputs: 4 },
      default: { seed: true, several: 'batch', maxOutputs: 4 },
      fashion_card: { seed: false, several: 'none', maxOutputs: 1 },
    });
    expect(variantsOf(undefined)).toEqual({ seed: true, several: 'none', maxOutputs: 1 });
  });

  it.each([
    [
      'num_outputs and repeat at once',
      'num_outputs: n\n    repeat: true',
      'routes.default.repeat: the model takes num_outputs already',
    ],
    ['max_outputs alone', 'max_outputs: 2', 'routes.default.max_outputs: set num_outputs'],
  ])('refuses a Cog route with %s', (_case, lines, message) => {
    const path = routingFile(
      `engines:\n  vton: { kind: cog, url: http://gpu-1:5000 }\nroutes:\n  default:\n    engine: vton\n    inputs: { image: image }\n    ${lines}\n`,
    );

    expect(problemsOf({ ENGINES_FILE: path })).toContainEqual(expect.stringContaining(message));
  });

  it('takes node ids written as numbers, text inputs on any node input, and a seed', () => {
    const path = routingFile(`${COMFY_ENGINE}
routes:
  fashion_swap:
    engine: comfy
    workflow: workflows/try-on.json
    inputs:
      person: { node: 11 }
      clothes: { node: "12" }
    output: { node: 15 }
    seed: { node: "3", input: seed }
  default:
    engine: comfy
    workflow: workflows/try-on.json
    inputs:
      image: { node: "11" }
      prompt: { node: "6", input: text }
    output: { node: "15" }
`);
    const sut = new AppConfig({ ENGINES_FILE: path });

    const [fashionSwap, enhance] = sut.engineRouting.routes;
    expect(fashionSwap).toMatchObject({ inputs: { person: { node: '11' } }, seed: { node: '3', input: 'seed' } });
    expect(enhance).toMatchObject({ inputs: { prompt: { node: '6', input: 'text' } }, seed: undefined });
  });

  it.each([
    [
      'an unknown top-level key',
      `${COMFY_ENGINE}\nroute: {}\n`,
      'route: unknown key (allowed: engines, routes, tools)',
    ],
    [
      'an unknown key of an engine',
      `${COMFY_ENGINE}    concurency: 2\nroutes: {}\n`,
      'engines.comfy.concurency: unknown key',
    ],
    ['an unknown kind', 'engines:\n  x:\n    kind: triton\n    url: http://h\n', 'engines.x.kind: must be one of cog'],
    ['a missing url', 'engines:\n  x:\n    kind: cog\n', 'engines.x: needs url (one server) or urls (a pool)'],
    [
      'both url and urls',
      'engines:\n  x:\n    kind: cog\n    url: http://a\n    urls: [http://b]\n',
      'engines.x: give url (one server) or urls (a pool), not both',
    ],
    [
      'a pool server with credentials in its URL',
      'engines:\n  x:\n    kind: comfyui\n    urls: [http://a:8188, http://u:p@b:8188]\n',
      'engines.x.urls[1]: must not hold credentials',
    ],
    [
      'a pool server that is not http(s)',
      'engines:\n  x:\n    kind: cog\n    urls: [http://a, ftp://b]\n',
      'engines.x.urls[1]: must be an http(s) URL',
    ],
    [
      'a pool server listed twice',
      'engines:\n  x:\n    kind: cog\n    urls: [http://a:5000, http://a:5000/]\n',
      'engines.x.urls[1]: http://a:5000 is listed twice',
    ],
    [
      'an empty pool',
      'engines:\n  x:\n    kind: cog\n    urls: []\n',
      'engines.x.urls: must NOT have fewer than 1 items',
    ],
    [
      'discovery without the name to resolve',
      'engines:\n  x:\n    kind: cog\n    urls: [http://a]\n    discover: dns\n',
      "engines.x.discover: needs url, whose host name resolves to the pool's servers",
    ],
    [
      'a discovery other than dns',
      'engines:\n  x:\n    kind: cog\n    url: http://a\n    discover: consul\n',
      'engines.x.discover:',
    ],
    [
      'a pool of hosted endpoints, which replicate is not',
      'engines:\n  x:\n    kind: replicate\n    token: t\n    urls: [http://a, http://b]\n',
      'engines.x.urls: unknown key',
    ],
    [
      'a url that is not http(s)',
      'engines:\n  x:\n    kind: cog\n    url: ftp://h\n',
      'engines.x.url: must be an http(s) URL',
    ],
    [
      'a url with credentials',
      'engines:\n  x:\n    kind: cog\n    url: http://u:p@h\n',
      'engines.x.url: must not hold credentials',
    ],
    [
      'a timeout that is not a duration',
      `${COMFY_ENGINE}    timeout: 10 minutes\n`,
      'engines.comfy.timeout: must be a duration above zero, such as 30s, 10m or 2h',
    ],
    [
      'a timeout of zero, which would end every job before it reached the model',
      `${COMFY_ENGINE}    timeout: 0s\n`,
      'engines.comfy.timeout: must be a duration above zero, such as 30s, 10m or 2h',
    ],
    [
      'a timeout without its unit',
      `${COMFY_ENGINE}    timeout: 90\n`,
      'engines.comfy.timeout: must be a duration above zero, such as 30s, 10m or 2h',
    ],
    ['a concurrency of 0', `${COMFY_ENGINE}    concurrency: 0\n`, 'engines.comfy.concurrency: must be >= 1'],
    [
      'an unset variable',
      'engines:\n  r:\n    kind: replicate\n    token: ${NOT_SET_ANYWHERE}\n',
      'engines.r.token: ${NOT_SET_ANYWHERE} is not set in the environment',
    ],
    [
      'an unknown tool',
      `${COMFY_ENGINE}routes:\n  tryon:\n    engine: comfy\n`,
      'routes.tryon: routes are named "tool" or "tool/generation_type"; there is no tool "tryon"',
    ],
    [
      'a route key with two slashes',
      `${COMFY_ENGINE}routes:\n  furniture/furniture_placement/x:\n    engine: comfy\n`,
      'routes.furniture/furniture_placement/x: routes are named "tool" or "tool/generation_type", with one slash at most',
    ],
    [
      'an unknown generation type',
      `${COMFY_ENGINE}routes:\n  fashion_swap_half/middle:\n    engine: comfy\n`,
      'routes.fashion_swap_half/middle: tool "fashion_swap_half" has no generation type "middle" (types: upper, lower)',
    ],
    [
      'a route to an unknown engine',
      `${COMFY_ENGINE}routes:\n  default:\n    engine: gpu\n    inputs: {}\n`,
      'routes.default.engine: there is no engine "gpu" under engines (engines: comfy)',
    ],
    [
      'an unknown key of a route',
      'engines:\n  c:\n    kind: cog\n    url: http://h\nroutes:\n  default:\n    engine: c\n    inputs: { image: img }\n    workflow: x.json\n',
      'routes.default.workflow: unknown key (allowed: engine, describe, inputs, params, seed, num_outputs, max_outputs, repeat)',
    ],
    [
      'an input the tool does not have',
      'engines:\n  c:\n    kind: cog\n    url: http://h\nroutes:\n  default:\n    engine: c\n    inputs: { image: img, mask: mask }\n',
      'routes.default.inputs.mask: tool "default" has no input "mask" (inputs: image, prompt)',
    ],
    [
      'a required input left unmapped',
      'engines:\n  c:\n    kind: cog\n    url: http://h\nroutes:\n  fashion_swap:\n    engine: c\n    inputs: { person: human_img }\n',
      'routes.fashion_swap.inputs: the tool\'s required input "clothes" is not mapped',
    ],
    [
      'a describe text of an input the tool does not have',
      'engines:\n  c:\n    kind: cog\n    url: http://h\nroutes:\n  default:\n    engine: c\n    inputs: { image: img }\n    describe: { photo: A photo. }\n',
      'routes.default.describe.photo: tool "default" has no input "photo"',
    ],
    [
      'a Replicate route with neither a model nor a version',
      'engines:\n  r:\n    kind: replicate\n    token: t\nroutes:\n  default:\n    engine: r\n    inputs: { image: image }\n',
      'routes.default: set model (owner/name of an official model), version (64 hex digits), or both (that version of that model)',
    ],
    [
      'a Replicate model that is not owner/name',
      'engines:\n  r:\n    kind: replicate\n    token: t\nroutes:\n  default:\n    engine: r\n    model: real-esrgan\n    inputs: { image: image }\n',
      'routes.default.model: must be owner/name of an official model, such as black-forest-labs/flux-kontext-pro, or of the version given',
    ],
    [
      'a missing workflow',
      `${COMFY_ENGINE}routes:\n  default:\n    engine: comfy\n    workflow: workflows/none.json\n    inputs: { image: { node: "11" } }\n    output: { node: "15" }\n`,
      'routes.default.workflow: workflows/none.json does not exist',
    ],
    [
      'a node id not in the workflow',
      `${COMFY_ENGINE}routes:\n  fashion_swap:\n    engine: comfy\n    workflow: workflows/try-on.json\n    inputs:\n      person: { node: "11" }\n      clothes: { node: "21" }\n    output: { node: "15" }\n`,
      'routes.fashion_swap.inputs.clothes.node: node "21" is not in workflows/try-on.json',
    ],
    [
      'an image input on a node that is not an image loader',
      `${COMFY_ENGINE}routes:\n  fashion_swap:\n    engine: comfy\n    workflow: workflows/try-on.json\n    inputs:\n      person: { node: "11" }\n      clothes: { node: "6" }\n    output: { node: "15" }\n`,
      'routes.fashion_swap.inputs.clothes.node: node "6" is a CLIPTextEncode, not an image loader',
    ],
    [
      'a text input without the node input it sets',
      `${COMFY_ENGINE}routes:\n  default:\n    engine: comfy\n    workflow: workflows/try-on.json\n    inputs:\n      image: { node: "11" }\n      prompt: { node: "6" }\n    output: { node: "15" }\n`,
      'routes.default.inputs.prompt.input: a text input needs the node input it sets',
    ],
    [
      'a text input on a node input that does not exist',
      `${COMFY_ENGINE}routes:\n  default:\n    engine: comfy\n    workflow: workflows/try-on.json\n    inputs:\n      image: { node: "11" }\n      prompt: { node: "6", input: txt }\n    output: { node: "15" }\n`,
      'routes.default.inputs.prompt.input: node "6" (CLIPTextEncode) in workflows/try-on.json has no input "txt" (inputs: text, clip)',
    ],
    [
      "a text input on a node input linked from another node's output, which the value would cut",
      `${COMFY_ENGINE}routes:\n  default:\n    engine: comfy\n    workflow: workflows/try-on.json\n    inputs:\n      image: { node: "11" }\n      prompt: { node: "6", input: clip }\n    output: { node: "15" }\n`,
      'routes.default.inputs.prompt.input: node "6" (CLIPTextEncode) input "clip" in workflows/try-on.json is a link from node "4", not a value to set',
    ],
    [
      "an image input on a loader input that does not exist, which would leave the workflow's own image in place",
      `${COMFY_ENGINE}routes:\n  default:\n    engine: comfy\n    workflow: workflows/try-on.json\n    inputs:\n      image: { node: "11", input: imagee }\n    output: { node: "15" }\n`,
      'routes.default.inputs.image.input: node "11" (LoadImage) in workflows/try-on.json has no input "imagee" (inputs: image)',
    ],
    [
      'two inputs into one node input, which would leave one of them unused',
      `${COMFY_ENGINE}routes:\n  fashion_swap:\n    engine: comfy\n    workflow: workflows/try-on.json\n    inputs:\n      person: { node: "11" }\n      clothes: { node: 11 }\n    output: { node: "15" }\n`,
      'routes.fashion_swap.inputs.clothes: node "11" input "image" is already set by routes.fashion_swap.inputs.person',
    ],
    [
      'a text input and the seed into one node input',
      `${COMFY_ENGINE}routes:\n  default:\n    engine: comfy\n    workflow: workflows/try-on.json\n    inputs:\n      image: { node: "11" }\n      prompt: { node: "3", input: seed }\n    output: { node: "15" }\n    seed: { node: "3", input: seed }\n`,
      'routes.default.seed: node "3" input "seed" is already set by routes.default.inputs.prompt',
    ],
    [
      'two inputs under one model name',
      'engines:\n  r:\n    kind: replicate\n    token: t\nroutes:\n  fabric:\n    engine: r\n    model: a/b\n    inputs: { target: image, fabric: image }\n',
      'routes.fabric.inputs.fabric: the model\'s input "image" is already given by routes.fabric.inputs.target',
    ],
    [
      'a param under the name of a mapped input',
      'engines:\n  c:\n    kind: cog\n    url: http://h\nroutes:\n  default:\n    engine: c\n    inputs: { image: img }\n    params: { img: x.png }\n',
      'routes.default.params.img: the model\'s input "img" is already given by routes.default.inputs.image',
    ],
    [
      'a ${VAR} in a route, which would reach the model as it is written',
      'engines:\n  c:\n    kind: cog\n    url: http://h\nroutes:\n  default:\n    engine: c\n    inputs: { image: img }\n    params: { options: { hf_token: "${HF_TOKEN}" } }\n',
      "routes.default.params.options.hf_token: ${HF_TOKEN} is not read from the environment in a route, only in an engine's settings (engines.<name>)",
    ],
    [
      'an output node that does not exist',
      `${COMFY_ENGINE}routes:\n  default:\n    engine: comfy\n    workflow: workflows/try-on.json\n    inputs: { image: { node: "11" } }\n    output: { node: "99" }\n`,
      'routes.default.output.node: node "99" is not in workflows/try-on.json',
    ],
  ])('refuses %s, naming the file and the key path', (_what, yaml, message) => {
    const path = routingFile(yaml);

    const problems = problemsOf({ ENGINES_FILE: path });

    expect(problems).toContainEqual(expect.stringContaining(`ENGINES_FILE ${path}: ${message}`));
  });

  it('refuses a workflow saved in the UI format, saying how to export it in API format', () => {
    const path = routingFile(
      `${COMFY_ENGINE}routes:\n  default:\n    engine: comfy\n    workflow: ui.json\n    inputs: { image: { node: "1" } }\n    output: { node: "2" }\n`,
      { 'ui.json': { last_node_id: 2, nodes: [{ id: 1, type: 'LoadImage' }], links: [] } },
    );

    expect(problemsOf({ ENGINES_FILE: path })).toEqual([
      `ENGINES_FILE ${path}: routes.default.workflow: ui.json is not a workflow in API format ({"<node id>": {"class_type", "inputs"}}); in ComfyUI, save it with Workflow > Export (API)`,
    ]);
  });

  it('refuses a file that is missing or is not YAML', () => {
    const missing = join(tmpdir(), 'no-such-engines.yaml');
    expect(problemsOf({ ENGINES_FILE: missing })).toEqual([`ENGINES_FILE ${missing}: cannot be read (ENOENT)`]);

    const broken = routingFile('engines:\n  c: [unclosed\n');
    expect(problemsOf({ ENGINES_FILE: broken })[0]).toMatch(/^ENGINES_FILE .*engines\.yaml: is not valid YAML: /);
  });

  it('reports an unset variable once, not again as the empty value it leaves', () => {
    const path = routingFile(
      'engines:\n  r:\n    kind: replicate\n    token: ${REPLICATE_TOKEN}\n    base_url: ${REPLICATE_URL}\n  c:\n    kind: comfyui\n    url: ${COMFY_URL}\n    timeout: ${COMFY_TIMEOUT}\n',
    );

    expect(problemsOf({ ENGINES_FILE: path, REPLICATE_URL: '' })).toEqual(
      [
        'r.token: ${REPLICATE_TOKEN}',
        'r.base_url: ${REPLICATE_URL}',
        'c.url: ${COMFY_URL}',
        'c.timeout: ${COMFY_TIMEOUT}',
      ].map((what) => `ENGINES_FILE ${path}: engines.${what} is not set in the environment`),
    );

    const urlOnly = routingFile('engines:\n  c:\n    kind: comfyui\n    url: ${COMFY_URL}\n');
    expect(problemsOf({ ENGINES_FILE: urlOnly })).toEqual([
      `ENGINES_FILE ${urlOnly}: engines.c.url: \${COMFY_URL} is not set in the environment`,
    ]);
  });

  it('reports every problem of a file at once', () => {
    const path = routingFile(
      'engines:\n  c:\n    kind: cog\n    url: http://h\n  d:\n    kind: cog\n    url: http://h\n    concurrency: -1\nroutes:\n  default:\n    engine: c\n    inputs: {}\n  tryon:\n    engine: c\n',
    );

    expect(problemsOf({ ENGINES_FILE: path })).toHaveLength(3);
  });

  it('checks the routes to an engine refused for a problem of its own, and names it among the engines', () => {
    const path = routingFile(
      'engines:\n  vton:\n    kind: cog\n    url: http://h\n    concurency: 2\nroutes:\n  default:\n    engine: vton\n    inputs: { image: img }\n    parms: {}\n  fabric:\n    engine: vtonn\n    inputs: { target: t, fabric: f }\n',
    );

    expect(problemsOf({ ENGINES_FILE: path })).toEqual([
      `ENGINES_FILE ${path}: engines.vton.concurency: unknown key (allowed: kind, concurrency, timeout, headers, url, urls, discover)`,
      `ENGINES_FILE ${path}: routes.default.parms: unknown key (allowed: engine, describe, inputs, params, seed, num_outputs, max_outputs, repeat)`,
      `ENGINES_FILE ${path}: routes.fabric.engine: there is no engine "vtonn" under engines (engines: vton)`,
    ]);
  });

  it('takes YAML merge keys, as operators write them in other deployment files', () => {
    const path = routingFile(
      'engines:\n  base: &gpu\n    kind: cog\n    url: http://base\n    timeout: 2m\n  vton:\n    <<: *gpu\n    url: http://h\nroutes: {}\n',
    );

    const sut = new AppConfig({ ENGINES_FILE: path });

    expect(sut.engineRouting.servers.find((server) => server.name === 'vton')).toMatchObject({
      kind: 'cog',
      url: 'http://h',
      timeoutMs: 120_000,
    });
  });

  it('takes settings shared from a top-level x- key, as compose files share them', () => {
    const path = routingFile(
      'x-gpu: &gpu\n  kind: cog\n  timeout: 2m\nengines:\n  vton:\n    <<: *gpu\n    url: http://h\nroutes: {}\n',
    );

    expect(new AppConfig({ ENGINES_FILE: path }).engineRouting.servers).toEqual([
      expect.objectContaining({ name: 'vton', kind: 'cog', url: 'http://h', timeoutMs: 120_000 }),
    ]);
  });

  it('refuses a variable written without braces, which would be taken as the text it is', () => {
    const path = routingFile('engines:\n  r:\n    kind: replicate\n    token: $REPLICATE_API_TOKEN\nroutes: {}\n');

    expect(problemsOf({ ENGINES_FILE: path, REPLICATE_API_TOKEN: 'r8_x' })).toEqual([
      `ENGINES_FILE ${path}: engines.r.token: write \${REPLICATE_API_TOKEN} to read REPLICATE_API_TOKEN from the environment`,
    ]);
  });

  it('refuses a variable without braces inside a value, as in a header, and leaves a $ within a word alone', () => {
    const path = routingFile(
      `${COMFY_ENGINE}    headers:\n      Authorization: Bearer $COMFY_TOKEN\n      X-Literal: a$b and $5\nroutes: {}\n`,
    );

    expect(problemsOf({ ENGINES_FILE: path, COMFY_TOKEN: 't' })).toEqual([
      `ENGINES_FILE ${path}: engines.comfy.headers.Authorization: write \${COMFY_TOKEN} to read COMFY_TOKEN from the environment`,
    ]);
  });

  it('refuses a tool routed by the file and by ENGINE_<TOOL> at once', () => {
    const path = routingFile(
      'engines:\n  c:\n    kind: cog\n    url: http://h\nroutes:\n  default:\n    engine: c\n    inputs: { image: image }\n',
    );

    expect(problemsOf({ ENGINES_FILE: path, ENGINE_DEFAULT: 'cog:http://other:5000' })).toEqual([
      'ENGINE_DEFAULT and ENGINES_FILE both route the tool "default": keep one',
    ]);
  });

  it('refuses a job deadline shorter than an engine timeout, which would end running jobs as timeout', () => {
    const path = routingFile(`${COMFY_ENGINE}    timeout: 20m\nroutes: {}\n`);

    expect(problemsOf({ ENGINES_FILE: path })).toEqual([
      'JOB_DEADLINE_MS (900000 ms) is shorter than the timeout of engine "comfy" (1200000 ms): its jobs would be ended as timeout while the model still runs; raise JOB_DEADLINE_MS',
    ]);
  });
});
