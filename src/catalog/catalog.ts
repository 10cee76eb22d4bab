/**
 * The catalog of tools, generation types and their inputs: the built-in tools, and a catalog in use made of them and
 * the routing file's `tools:` section (docs/engines.md). The tools list, the generation types endpoint, upload
 * validation and the worker's choice of pipeline all read the catalog in use.
 */
import type { components } from '../generated/openapi.js';

/** What tool ids, generation type ids and input names look like (the contract's `ToolId`, `GenerationTypeId`). */
export const CATALOG_ID = /^[a-z][a-z0-9_]{1,39}$/;

export interface CatalogInput {
  name: components['schemas']['GenerationInput']['name'];
  kind: 'image' | 'text';
  required: boolean;
  /** What the local engine needs of the input, and the error code an input that does not fit gets. */
  description: string;
  /**
   * What the input is, and nothing a particular engine needs of it: shown when a model server serves the tool and its
   * route's `describe` says nothing of the input (a real model takes photos the local engine refuses).
   */
  neutralDescription: string;
  /** For text inputs only. */
  maxLength?: number;
}

export interface CatalogGenerationType {
  id: string;
  title: string;
  description: string;
  /** The form fields of a job of this type. */
  inputs: readonly CatalogInput[];
}

export interface CatalogTool {
  id: string;
  group: 'fashion' | 'interior' | 'textile' | 'default';
  title: string;
  /** Every input of any of its generation types (a built-in tool's types all take the same ones). */
  inputs: readonly CatalogInput[];
  /** The first one is the tool's default. */
  generationTypes: readonly CatalogGenerationType[];
  /** Defined in the routing file's `tools:` section, not built in: a model server serves it, never the local engine. */
  configured: boolean;
}

/** A built-in tool as written below: every generation type takes the tool's inputs. */
type BuiltInTool = Omit<CatalogTool, 'generationTypes' | 'configured'> & {
  generationTypes: ReadonlyArray<Omit<CatalogGenerationType, 'inputs'>>;
};

const clothes: CatalogInput = {
  name: 'clothes',
  kind: 'image',
  required: true,
  neutralDescription: 'Photo of the garment.',
  description:
    'Photo of the garment alone (laid flat, on a hanger or a mannequin) on a plain, evenly coloured background, or a PNG cut-out with transparency. On a busy background the job ends `unsupported_input`.',
};
/** The person photo of a try-on: how much of the body it must show depends on where the garment goes. */
const person = (description: string): CatalogInput => ({
  name: 'person',
  kind: 'image',
  required: true,
  description,
  neutralDescription: 'Photo of the person.',
});

const BUILT_IN_TOOLS: readonly BuiltInTool[] = [
  {
    id: 'fashion_swap',
    group: 'fashion',
    title: 'Virtual try-on',
    inputs: [
      clothes,
      person(
        'Photo of one person, full length (head to feet), standing and facing the camera, any background. Nobody in the photo: `no_person_found`; the knees or feet out of the frame: `unsupported_input`.',
      ),
    ],
    generationTypes: [
      {
        id: 'fashion_swap_full',
        title: 'Full outfit',
        description: 'Dresses the person in the garment, fitted over the torso.',
      },
    ],
  },
  {
    id: 'fashion_swap_half',
    group: 'fashion',
    title: 'Half-body try-on',
    inputs: [
      clothes,
      person(
        'Photo of one person facing the camera, any background. `upper` needs the head to at least the chest in the frame, `lower` the hips to the feet. Nobody in the photo: `no_person_found`; the part the garment goes on out of the frame: `unsupported_input`.',
      ),
    ],
    generationTypes: [
      { id: 'upper', title: 'Upper half', description: 'Places a top on the upper body, shoulders to hips.' },
      {
        id: 'lower',
        title: 'Lower half',
        description: 'Places trousers or a skirt on the lower body, hips to ankles.',
      },
    ],
  },
  {
    id: 'fashion_card',
    group: 'fashion',
    title: 'Product card',
    inputs: [clothes],
    generationTypes: [
      {
        id: 'product_card',
        title: 'Product card',
        description: 'The garment cut out and centred on a clean background with margins and a soft shadow.',
      },
    ],
  },
  {
    id: 'lengerie',
    group: 'fashion',
    title: 'Lingerie try-on',
    inputs: [
      clothes,
      person(
        'Photo of one person facing the camera, from the head to the hips or below, any background. Nobody in the photo: `no_person_found`; the hips out of the frame: `unsupported_input`.',
      ),
    ],
    generationTypes: [
      {
        id: 'lengerie_swap',
        title: 'Lingerie try-on',
        description: 'Dresses the person in the lingerie piece, fitted over the torso.',
      },
    ],
  },
  {
    id: 'furniture',
    group: 'interior',
    title: 'Furniture placement',
    inputs: [
      {
        name: 'room',
        kind: 'image',
        required: true,
        neutralDescription: 'Photo of the room.',
        description: 'Photo of the room, the floor visible in its lower part.',
      },
      {
        name: 'furniture',
        kind: 'image',
        required: true,
        neutralDescription: 'Photo of the piece of furniture.',
        description:
          'Photo of the piece of furniture alone on a plain, evenly coloured background, or a PNG cut-out with transparency. On a busy background the job ends `unsupported_input`.',
      },
    ],
    generationTypes: [
      {
        id: 'furniture_placement',
        title: 'Place furniture',
        description: 'The piece cut out and placed on the floor of the room, scaled, with a contact shadow.',
      },
    ],
  },
  {
    id: 'fabric',
    group: 'textile',
    title: 'Fabric retexture',
    inputs: [
      {
        name: 'fabric',
        kind: 'image',
        required: true,
        neutralDescription: 'Photo or scan of the fabric.',
        description: 'Photo or scan of the fabric pattern, filling the frame.',
      },
      {
        name: 'target',
        kind: 'image',
        required: true,
        neutralDescription: 'Photo of the object to retexture.',
        description:
          'Photo of the object to retexture (a sofa, a cushion, a garment) on a plain, evenly coloured background. On a busy background the job ends `unsupported_input`.',
      },
    ],
    generationTypes: [
      {
        id: 'fabric_retexture',
        title: 'Retexture',
        description: "The fabric laid over the object, keeping the object's light and shadows.",
      },
    ],
  },
  {
    id: 'default',
    group: 'default',
    title: 'Image enhance',
    inputs: [
      {
        name: 'image',
        kind: 'image',
        required: true,
        description: 'The photo to enhance.',
        neutralDescription: 'The photo to enhance.',
      },
      {
        name: 'prompt',
        kind: 'text',
        required: false,
        maxLength: 1000,
        description: 'Optional description of the wanted result, at most 1000 characters; recorded with the job.',
        neutralDescription: 'Optional description of the wanted result, at most 1000 characters.',
      },
    ],
    generationTypes: [{ id: 'enhance', title: 'Enhance', description: 'Normalised contrast and gentle sharpening.' }],
  },
];

/** The built-in tools, as the service ships them. */
export const CATALOG: readonly CatalogTool[] = BUILT_IN_TOOLS.map((tool) => ({
  ...tool,
  configured: false,
  generationTypes: tool.generationTypes.map((type) => ({ ...type, inputs: tool.inputs })),
}));

/** A set of tools in use: the built-in ones, or those and the routing file's `tools:` section. */
export class Catalog {
  private readonly byId: ReadonlyMap<string, CatalogTool>;
  private readonly typeOwners: ReadonlyMap<string, CatalogTool>;

  /**
   * @param tools the tools offered, in the order they are listed
   * @param withdrawn tools the file withdrew (`disabled: true`): offered to nobody, but their routes still serve the
   *   jobs already made of them
   */
  constructor(
    readonly tools: readonly CatalogTool[],
    readonly withdrawn: readonly CatalogTool[] = [],
  ) {
    this.byId = new Map(tools.map((tool) => [tool.id, tool]));
    this.typeOwners = new Map(tools.flatMap((tool) => tool.generationTypes.map((type) => [type.id, tool] as const)));
  }

  /** A tool offered now. */
  findTool(id: string): CatalogTool | undefined {
    return this.byId.get(id);
  }

  /** A generation type offered now, with its tool. */
  findGenerationType(
    toolId: string,
    generationType: string,
  ): { tool: CatalogTool; type: CatalogGenerationType } | undefined {
    const tool = this.typeOwners.get(generationType);
    const type =
      tool?.id === toolId ? tool.generationTypes.find((candidate) => candidate.id === generationType) : undefined;
    return tool && type && { tool, type };
  }
}

/** The catalog when no routing file says otherwise. */
export const BUILT_IN = new Catalog(CATALOG);

export function findTool(id: string): CatalogTool | undefined {
  return BUILT_IN.findTool(id);
}
