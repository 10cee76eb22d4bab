import { IsNotEmpty, IsString } from 'class-validator';
import type { components, operations } from '../generated/openapi.js';
import type { CatalogTool } from './catalog.js';

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

  static listFor(tool: CatalogTool): GenerationTypeDto[] {
    const inputs = tool.inputs.map(({ name, kind, required, description }) => ({ name, kind, required, description }));
    return tool.generationTypes.map((type, index) => ({
      generation_type: type.id,
      tool: tool.id,
      title: type.title,
      description: type.description,
      is_default: index === 0,
      inputs,
    }));
  }
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
