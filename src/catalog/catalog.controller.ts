import { Controller, Get, Query } from '@nestjs/common';
import { DomainError } from '../common/problem.js';
import { CATALOG, findTool } from './catalog.js';
import { GenerationTypeDto, GenerationTypesQueryDto, ToolDto } from './catalog.dto.js';

@Controller('generation')
export class CatalogController {
  private readonly tools = CATALOG.map((tool) => ToolDto.from(tool));

  @Get('tools')
  listTools(): ToolDto[] {
    return this.tools;
  }

  @Get('generationTypes')
  listGenerationTypes(@Query() { tool }: GenerationTypesQueryDto): GenerationTypeDto[] {
    const found = findTool(tool);
    if (!found) throw new DomainError('not_found', `There is no tool "${tool}"; see /generation/tools.`);
    return GenerationTypeDto.listFor(found);
  }
}
