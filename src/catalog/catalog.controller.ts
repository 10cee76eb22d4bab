import { Controller, Get, Query } from '@nestjs/common';
import { DomainError } from '../common/problem.js';
import { CATALOG, findTool } from './catalog.js';
import { GenerationTypeDto, ToolDto } from './catalog.dto.js';

@Controller('generation')
export class CatalogController {
  private readonly tools = CATALOG.map((tool) => ToolDto.from(tool));

  @Get('tools')
  listTools(): ToolDto[] {
    return this.tools;
  }

  @Get('generationTypes')
  listGenerationTypes(@Query('tool') tool: unknown): GenerationTypeDto[] {
    if (typeof tool !== 'string' || tool === '') {
      throw new DomainError('validation_failed', 'Query parameter "tool" is required: a tool from /generation/tools.', {
        errors: [{ field: 'tool', message: 'required, a single tool identifier' }],
      });
    }
    const found = findTool(tool);
    if (!found) throw new DomainError('not_found', `There is no tool "${tool}"; see /generation/tools.`);
    return GenerationTypeDto.listFor(found);
  }
}
