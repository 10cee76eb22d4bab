import { IsNotEmpty, IsString } from 'class-validator';
import { DomainError } from '../common/problem.js';
import type { components, operations } from '../generated/openapi.js';
import type { Catalog, CatalogTool } from './catalog.js';

type ToolSchema = components['schemas']['Tool'];
type GenerationTypeSchema = components['schemas']['GenerationType'];
type GenerationInputSchema = components['schemas']['GenerationInput'];

export class ToolDto implements ToolSchema {
  group_tool: ToolSchema['group_tool'];
  tool: string;
  title: string;

  static from(tool: CatalogTool): ToolDto {
    return { group_tool: tool.group, tool: tool.id, title: tool.title };
  }
}

export class GenerationTypeDto implements GenerationTypeSchema {
  generation_type: string;
  tool: string;
  title: string;
  description: string;
  is_default: boolean;
  inputs: GenerationInputSchema[];

  /**
   * The tool's generation types, each with its inputs described as the engine serving it needs them: the local
   * engine's own descriptions, or for a type a model server serves (`remote` names its route's `describe` texts),
   * those texts and neutral ones.
   */
  static listFor(
    tool: CatalogTool,
    remote: (generationType: string) => Readonly<Record<string, string>> | undefined,
  ): GenerationTypeDto[] {
    return tool.generationTypes.map((type, index) => {
      const describe = remote(type.id);
      return {
        generation_type: type.id,
        tool: tool.id,
        title: type.title,
        description: type.description,
        is_default: index === 0,
        inputs: type.inputs.map(({ name, kind, required, description, neutralDescription, maxLength }) => ({
          name,
          kind,
          required,
          ...(maxLength === undefined ? {} : { max_length: maxLength }),
          description: describe ? (describe[name] ?? neutralDescription) : description,
        })),
      };
    });
  }
}

/** The tool `GET /generation/generationTypes?tool=` asks for, in the catalog in use; an unknown one is a 404. */
export function toolAskedFor(id: string, catalog: Catalog): CatalogTool {
  const found = catalog.findTool(id);
  if (!found) throw new DomainError('not_found', `There is no tool "${id}"; see /generation/tools.`);
  return found;
}

type GenerationTypesQuery = operations['listGenerationTypes']['parameters']['query'];
const TOOL_MESSAGE = 'required, a single tool identifier';
const TOOL_DETAIL = 'Query parameter "tool" is required: a tool from /generation/tools.';

/** `GET /generation/generationTypes?tool=`: one non-empty tool id (an unknown one is a 404, not a 400). */
export class GenerationTypesQueryDto implements GenerationTypesQuery {
  @IsString({ message: TOOL_MESSAGE, context: { detail: TOOL_DETAIL } })
  @IsNotEmpty({ message: TOOL_MESSAGE, context: { detail: TOOL_DETAIL } })
  tool: string;
}
