"""Libraries that agents are built on, unchanged, against a real server on the starter 1.5B:
instructor, pydantic-ai and LangChain's ChatOpenAI, the last two over chat completions and over
the Responses API."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field


class Person(BaseModel):
    name: str
    age: int = Field(ge=0, le=150)


TEXT = "Ada Lovelace was 36 years old when she died."


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_instructor_extracts_a_validated_object(served_target, mode):
    import instructor

    client = instructor.from_openai(served_target.client(), mode=getattr(instructor.Mode, mode))
    person = client.chat.completions.create(
        model="qwen", response_model=Person, temperature=0, max_tokens=80, max_retries=0,
        messages=[{"role": "user", "content": f"Extract the person: {TEXT}"}])
    assert person.name.startswith("Ada") and person.age == 36


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_pydantic_ai_agent_with_structured_output_and_a_tool(served_target, api):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    kind = OpenAIChatModel if api == "chat" else OpenAIResponsesModel
    model = kind("qwen", provider=OpenAIProvider(base_url=f"{served_target.url}/v1",
                                                 api_key="test-key-0123"))
    agent = Agent(model, output_type=Person, model_settings={"temperature": 0, "max_tokens": 120})
    calls = []

    @agent.tool_plain
    def age_of(name: str) -> int:
        """The age of a famous person, in years."""
        calls.append(name)
        return 36

    result = agent.run_sync("How old was Ada Lovelace? Use the tool, then answer as a Person.")
    assert isinstance(result.output, Person) and result.output.age == 36
    assert calls


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_langchain_bind_tools_returns_tool_calls(served_target, api):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return "18 C, cloudy"

    llm = ChatOpenAI(model="qwen", base_url=f"{served_target.url}/v1", api_key="test-key-0123",
                     temperature=0, max_tokens=120, max_retries=0,
                     use_responses_api=api == "responses")
    msg = llm.bind_tools([get_weather]).invoke("What's the weather in Paris?")
    assert [c["name"] for c in msg.tool_calls] == ["get_weather"]
    assert msg.tool_calls[0]["args"]["city"] == "Paris"
    structured = llm.with_structured_output(Person).invoke(f"Extract the person: {TEXT}")
    assert structured.age == 36
