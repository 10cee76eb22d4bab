import { Controller, Get, Query } from '@nestjs/common';
import { LiveRouting } from '../config/live-routing.js';
import { GenerationTypeDto, GenerationTypesQueryDto, toolAskedFor, ToolDto } from './catalog.dto.js';

/** The catalog in use (the routing file's, as last reloaded), read for every request: nothing is kept here. */
@Controller('generation')
export class CatalogController {
  constructor(private readonly routing: LiveRouting) {}

  @Get('tools')
  listTools(): ToolDto[] {
    return this.routing.current.catalog.tools.map((tool) => ToolDto.from(tool));
  }

  @Get('generationTypes')
  listGenerationTypes(@Query() { tool }: GenerationTypesQueryDto): GenerationTypeDto[] {
    const { catalog, engineRouting } = this.routing.current;
    const found = toolAskedFor(tool, catalog);
    // The `describe` texts of each route to a model server, by route key (`tool` or `tool/generation_type`).
    const remote = new Map(engineRouting.routes.map((route) => [route.key, route.describe]));
    return GenerationTypeDto.listFor(
      found,
      (generationType) => remote.get(`${found.id}/${generationType}`) ?? remote.get(found.id),
    );
  }
}
